package main

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/stack"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
)

// consoleGet is the body of a console page, read with c.
func consoleGet(t *testing.T, c *http.Client, addr, path string) (int, string) {
	t.Helper()
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// A refused policy reload is shown to the admin token with every problem,
// and to a tenant token with its own policy file's problems only: another
// tenant's file names, lines and messages stay out of its pages.
func TestConsoleShowsATenantTokenOnlyItsOwnPolicyProblems(t *testing.T) {
	st := startConsole(t)
	admin, _ := consoleClient(t, st.addr, consoleAdmin)
	beta, _ := consoleClient(t, st.addr, consoleOperator)

	// Both files break; the last good policies (and beta's operator token) stay in force.
	for name, body := range map[string]string{
		"acme.yaml": stack.TenantPolicy("acme", binKey, "memory:\n  mode: acme-secret-mode\n"),
		"beta.yaml": stack.TenantPolicy("beta", betaKey, "operator_tokens_sha256: [\""+stack.KeyHash(consoleOperator)+"\"]\nmemory:\n  mode: beta-typo\n"),
	} {
		if err := os.WriteFile(filepath.Join(st.pols, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, "a refused reload naming both files", func() {
		for {
			_, page := consoleGet(t, admin, st.addr, "/admin/ui/health")
			if strings.Contains(page, "acme.yaml:4") && strings.Contains(page, "beta.yaml:5") {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	for _, path := range []string{"/admin/ui/", "/admin/ui/health"} {
		t.Run("the admin token sees every problem on "+path, func(t *testing.T) {
			_, page := consoleGet(t, admin, st.addr, path)
			for _, want := range []string{"acme.yaml:4", "acme-secret-mode", "beta.yaml:5", "beta-typo"} {
				if !strings.Contains(page, want) {
					t.Errorf("lacks %q:\n%s", want, page)
				}
			}
			if strings.Contains(page, st.pols) {
				t.Errorf("shows the policies folder's host path:\n%s", page)
			}
		})
		t.Run("beta's token sees beta's problem and nothing of acme's on "+path, func(t *testing.T) {
			code, page := consoleGet(t, beta, st.addr, path)
			if code != http.StatusOK || !strings.Contains(page, "beta.yaml:5") || !strings.Contains(page, "beta-typo") {
				t.Errorf("%d, lacks beta's own problem:\n%s", code, page)
			}
			for _, leak := range []string{"acme", st.pols} {
				if strings.Contains(page, leak) {
					t.Errorf("shows %q:\n%s", leak, page)
				}
			}
			if !strings.Contains(page, "1 problem(s) in policy files this token may not see") {
				t.Errorf("does not say a problem elsewhere was left out:\n%s", page)
			}
		})
	}
}

// acmeMemory is the id of the one memory acme's model wrote, read from the
// console's memory page with c.
func acmeMemory(t *testing.T, c *http.Client, addr string) string {
	t.Helper()
	_, page := consoleGet(t, c, addr, "/admin/ui/tenants/acme/memory")
	i := strings.Index(page, "/admin/ui/tenants/acme/memory/")
	if i < 0 {
		t.Fatalf("acme's memory page lists no memory:\n%s", page)
	}
	return strings.SplitN(page[i+len("/admin/ui/tenants/acme/memory/"):], `"`, 2)[0]
}

var (
	formAction  = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
	hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
)

// pageForm is the last form of a page that posts somewhere other than the
// sign-out: its action and its hidden fields, as a browser would send them.
func pageForm(t *testing.T, page string) (string, url.Values) {
	t.Helper()
	forms := formAction.FindAllStringSubmatchIndex(page, -1)
	if len(forms) == 0 {
		t.Fatalf("no form on the page:\n%s", page)
	}
	last := forms[len(forms)-1]
	action := html.UnescapeString(page[last[2]:last[3]])
	body := page[last[1]:]
	body = body[:strings.Index(body, "</form>")]
	vals := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(body, -1) {
		vals.Add(m[1], html.UnescapeString(m[2]))
	}
	return action, vals
}

// memoryAPI calls the memory operator API with the admin token.
func memoryAPI(t *testing.T, addr, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("X-Api-Key", consoleAdmin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// A restore confirmed on a page shown before someone else wrote the memory
// writes nothing: the form carries the content hash the page was shown
// with, and the console answers 409.
func TestConsoleRestoreRefusesAMemoryChangedAfterTheConfirmationPage(t *testing.T) {
	st := startConsole(t)
	say(t, st.addr, "write this down")
	say(t, st.addr, "poison it")
	admin, _ := consoleClient(t, st.addr, consoleAdmin)
	id := acmeMemory(t, admin, st.addr)
	_, file := consoleGet(t, admin, st.addr, "/admin/ui/tenants/acme/memory/"+id)
	links := regexp.MustCompile(`href="(/admin/ui/tenants/acme/memory/[^"]+/restore\?version=[^"]+)"`).FindAllStringSubmatch(file, -1)
	if len(links) < 2 {
		t.Fatalf("the file page has %d restore links, want one per version:\n%s", len(links), file)
	}
	// The oldest version: the model's create, before the poisoning.
	_, confirm := consoleGet(t, admin, st.addr, html.UnescapeString(links[len(links)-1][1]))
	action, form := pageForm(t, confirm)

	// Someone writes the memory after the operator saw the confirmation page.
	const later = "Written after the confirmation page.\n"
	if code, body := memoryAPI(t, st.addr, "POST", "/v1/memory_stores/memstore_acme/memories/"+id, `{"content":"`+strings.TrimSuffix(later, "\n")+`\n"}`); code != 200 {
		t.Fatalf("update through the memory API: %d %s", code, body)
	}

	resp, err := admin.PostForm("http://"+st.addr+action, form)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "nothing was written") {
		t.Errorf("the restore answered %d, want 409 and nothing written:\n%s", resp.StatusCode, b)
	}
	if _, body := memoryAPI(t, st.addr, "GET", "/v1/memory_stores/memstore_acme/memories/"+id+"?view=full", ""); gjson.Get(body, "content").String() != later {
		t.Errorf("after the refused restore the memory holds %q, want the later write %q", gjson.Get(body, "content").String(), later)
	}

	t.Run("a form without expected_sha256 writes nothing either", func(t *testing.T) {
		form.Del("expected_sha256")
		resp, err := admin.PostForm("http://"+st.addr+action, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
		if _, body := memoryAPI(t, st.addr, "GET", "/v1/memory_stores/memstore_acme/memories/"+id+"?view=full", ""); gjson.Get(body, "content").String() != later {
			t.Errorf("the memory holds %q", gjson.Get(body, "content").String())
		}
	})
}

// The console's memory pages and export are audited like the same reads
// through /v1/memory_stores: one record each, with the operator, the tenant,
// the memory and the status answered.
func TestConsoleMemoryReadsAreAudited(t *testing.T) {
	st := startConsole(t)
	say(t, st.addr, "write this down")
	admin, _ := consoleClient(t, st.addr, consoleAdmin)
	id := acmeMemory(t, admin, st.addr)
	reads := []string{"/admin/ui/tenants/acme/memory/" + id, "/admin/ui/tenants/acme/export"}
	for _, path := range reads {
		if code, body := consoleGet(t, admin, st.addr, path); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	if code, body := memoryAPI(t, st.addr, "GET", "/v1/memory_stores/memstore_acme/memories/"+id, ""); code != 200 {
		t.Fatalf("the same read through the API: %d %s", code, body)
	}
	code, audit := memoryAPI(t, st.addr, "GET", "/v1/memory_stores/memstore_acme/audit", "")
	if code != 200 {
		t.Fatalf("audit: %d %s", code, audit)
	}
	recs := gjson.Get(audit, "data").Array()
	find := func(path string) gjson.Result {
		for _, r := range recs {
			if r.Get("path").String() == path {
				return r
			}
		}
		return gjson.Result{}
	}
	api := find("/v1/memory_stores/memstore_acme/memories/" + id)
	if !api.Exists() {
		t.Fatalf("the API read is not in the audit log:\n%s", audit)
	}
	for _, path := range append(reads, "/admin/ui/tenants/acme/memory") {
		t.Run("the console's GET "+path+" is audited like the API's read", func(t *testing.T) {
			r := find(path)
			if !r.Exists() {
				t.Fatalf("not in the audit log:\n%s", audit)
			}
			for _, f := range []string{"operator", "tenant", "method", "status"} {
				if r.Get(f).String() != api.Get(f).String() {
					t.Errorf("%s %q, the API read's %q", f, r.Get(f).String(), api.Get(f).String())
				}
			}
			if strings.Contains(path, id) && r.Get("memory_id").String() != id {
				t.Errorf("memory_id %q, want %s", r.Get("memory_id").String(), id)
			}
		})
	}
}
