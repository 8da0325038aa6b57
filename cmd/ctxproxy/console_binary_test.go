package main

import (
	"encoding/base64"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
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

// signIn posts the sign-in form as a browser on this console would (the
// form's page fetched first, its cookie and CSRF token sent back), with hdr
// added to the POST, and answers the POST's response, unfollowed.
func signIn(t *testing.T, addr, token string, hdr http.Header) *http.Response {
	t.Helper()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get("http://" + addr + "/admin/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req, _ := http.NewRequest("POST", "http://"+addr+"/admin/ui/login",
		strings.NewReader(url.Values{"token": {token}, "csrf_token": {csrfOf(t, string(form))}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range resp.Cookies() {
		req.AddCookie(c)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err = noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// sessionCookieOf is the session cookie a response sets, or nil.
func sessionCookieOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "ctxproxy_session" && c.MaxAge > 0 {
			return c
		}
	}
	return nil
}

// withSession is the status and Location of GET path sent with only the
// session cookie value, as any browser holding it would.
func withSession(t *testing.T, addr, path, value string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.AddCookie(&http.Cookie{Name: "ctxproxy_session", Value: value})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// The console's sign-in is a session of its own: a random id in the cookie
// (nothing of the token), kept on the server, ended by sign-out and by the
// token's removal from the policies; the sign-in form is refused from
// another site or without its CSRF token.
func TestConsoleSignInIsASessionOfItsOwn(t *testing.T) {
	st := startConsole(t)
	ok := func(t *testing.T, value string) bool {
		t.Helper()
		code, _ := withSession(t, st.addr, "/admin/ui/", value)
		return code == http.StatusOK
	}

	t.Run("a sign-in posted from another site is refused and opens no session", func(t *testing.T) {
		for name, hdr := range map[string]http.Header{
			"Sec-Fetch-Site: cross-site": {"Sec-Fetch-Site": {"cross-site"}},
			"Origin of another host":     {"Origin": {"https://attacker.example"}},
		} {
			resp := signIn(t, st.addr, consoleAdmin, hdr)
			if resp.StatusCode != http.StatusForbidden || sessionCookieOf(resp) != nil {
				t.Errorf("%s: status %d, cookies %v", name, resp.StatusCode, resp.Cookies())
			}
		}
	})
	t.Run("a sign-in without the form's CSRF token is refused and opens no session", func(t *testing.T) {
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).PostForm(
			"http://"+st.addr+"/admin/ui/login", url.Values{"token": {consoleAdmin}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || sessionCookieOf(resp) != nil {
			t.Errorf("status %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
	})

	first := sessionCookieOf(signIn(t, st.addr, consoleAdmin, nil))
	second := sessionCookieOf(signIn(t, st.addr, consoleAdmin, nil))
	t.Run("the cookie is a random id: nothing of the token, another one each sign-in", func(t *testing.T) {
		if first == nil || second == nil {
			t.Fatal("a sign-in set no session cookie")
		}
		for _, c := range []*http.Cookie{first, second} {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/admin/ui/" || c.Secure {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/admin/ui/, not Secure over plain HTTP", c)
			}
			raw, _ := base64.RawURLEncoding.DecodeString(c.Value)
			if strings.Contains(c.Value, consoleAdmin) || strings.Contains(string(raw), consoleAdmin) ||
				strings.Contains(c.Value, base64.RawURLEncoding.EncodeToString([]byte(consoleAdmin))) {
				t.Errorf("the cookie %q carries the token", c.Value)
			}
		}
		if first.Value == second.Value {
			t.Error("two sign-ins got the same session id")
		}
		if !ok(t, first.Value) || !ok(t, second.Value) {
			t.Error("a fresh session is not accepted")
		}
		if ok(t, base64.RawURLEncoding.EncodeToString([]byte(consoleAdmin))) {
			t.Error("the token itself, base64, is still accepted as a cookie")
		}
	})
	t.Run("sign-out ends the session on the server; another session of the token lives on", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		u, _ := url.Parse("http://" + st.addr + "/admin/ui/")
		jar.SetCookies(u, []*http.Cookie{{Name: "ctxproxy_session", Value: first.Value, Path: "/admin/ui/"}})
		c := &http.Client{Jar: jar}
		_, page := consoleGet(t, c, st.addr, "/admin/ui/")
		resp, err := c.PostForm("http://"+st.addr+"/admin/ui/logout", url.Values{"csrf_token": {csrfOf(t, page)}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if code, where := withSession(t, st.addr, "/admin/ui/", first.Value); code != http.StatusSeeOther || where != "/admin/ui/login" {
			t.Errorf("the signed-out session's cookie, replayed: %d %s", code, where)
		}
		if !ok(t, second.Value) {
			t.Error("sign-out ended another session too")
		}
	})
	t.Run("removing the token from the policy ends its sessions, for good", func(t *testing.T) {
		beta := sessionCookieOf(signIn(t, st.addr, consoleOperator, nil))
		if beta == nil || !ok(t, beta.Value) {
			t.Fatal("beta's operator token opened no session")
		}
		betaFile := filepath.Join(st.pols, "beta.yaml")
		withToken, err := os.ReadFile(betaFile)
		if err != nil {
			t.Fatal(err)
		}
		reload := func(body string) {
			t.Helper()
			if err := os.WriteFile(betaFile, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			st.proc.Signal(syscall.SIGHUP)
		}
		reload(stack.TenantPolicy("beta", betaKey, "memory:\n  mode: proxy\n"))
		testwait.Eventually(t, "beta's session refused once its token is gone", func() {
			for ok(t, beta.Value) {
				time.Sleep(20 * time.Millisecond)
			}
		})
		// The token comes back: the session it had does not.
		reload(string(withToken))
		testwait.Eventually(t, "beta's token accepted again", func() {
			for signIn(t, st.addr, consoleOperator, nil).StatusCode != http.StatusSeeOther {
				time.Sleep(20 * time.Millisecond)
			}
		})
		if ok(t, beta.Value) {
			t.Error("the session of a removed token came back with the token")
		}
	})
}

// The session cookie is Secure when the browser's connection is TLS: here,
// to a front proxy named by --trusted-proxies, which says so in
// X-Forwarded-Proto. From any other peer the header is a client's claim and
// changes nothing.
func TestConsoleSessionCookieIsSecureBehindATrustedTLSProxy(t *testing.T) {
	https := http.Header{"X-Forwarded-Proto": {"https"}}
	t.Run("from a trusted proxy, https", func(t *testing.T) {
		st := startConsole(t, "--trusted-proxies", "10.0.0.0/8, 127.0.0.1")
		if c := sessionCookieOf(signIn(t, st.addr, consoleAdmin, https)); c == nil || !c.Secure {
			t.Errorf("cookie %+v, want Secure", c)
		}
		if c := sessionCookieOf(signIn(t, st.addr, consoleAdmin, nil)); c == nil || c.Secure {
			t.Errorf("plain HTTP through the proxy: cookie %+v, want not Secure", c)
		}
	})
	t.Run("from a peer no one said to trust", func(t *testing.T) {
		st := startConsole(t, "--trusted-proxies", "10.0.0.0/8")
		if c := sessionCookieOf(signIn(t, st.addr, consoleAdmin, https)); c == nil || c.Secure {
			t.Errorf("cookie %+v, want not Secure: the header came from an untrusted peer", c)
		}
	})
}

// With replicas on one PostgreSQL database, a session opened on one is
// known to the other, and a sign-out on either ends it on both.
func TestConsoleSessionsAreSharedByReplicas(t *testing.T) {
	db := pgtest.New(t, "console_sessions")
	shared := []string{"--memory-store", db.URL, "--ledger", db.URL}
	a, b := startConsole(t, shared...), startConsole(t, shared...)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	_, form := consoleGet(t, c, a.addr, "/admin/ui/login")
	resp, err := c.PostForm("http://"+a.addr+"/admin/ui/login", url.Values{"token": {consoleAdmin}, "csrf_token": {csrfOf(t, form)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var value string
	for _, ck := range jar.Cookies(&url.URL{Scheme: "http", Host: a.addr, Path: "/admin/ui/"}) {
		if ck.Name == "ctxproxy_session" {
			value = ck.Value
		}
	}
	if value == "" {
		t.Fatal("no session after signing in on replica a")
	}
	if code, where := withSession(t, b.addr, "/admin/ui/", value); code != http.StatusOK {
		t.Fatalf("replica b does not know a's session: %d %s", code, where)
	}
	// Sign out on b.
	bjar, _ := cookiejar.New(nil)
	bjar.SetCookies(&url.URL{Scheme: "http", Host: b.addr, Path: "/admin/ui/"}, []*http.Cookie{{Name: "ctxproxy_session", Value: value, Path: "/admin/ui/"}})
	bc := &http.Client{Jar: bjar}
	_, page := consoleGet(t, bc, b.addr, "/admin/ui/")
	if resp, err = bc.PostForm("http://"+b.addr+"/admin/ui/logout", url.Values{"csrf_token": {csrfOf(t, page)}}); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, _ := withSession(t, a.addr, "/admin/ui/", value); code != http.StatusSeeOther {
		t.Errorf("replica a still serves the session signed out on b: %d", code)
	}
}
