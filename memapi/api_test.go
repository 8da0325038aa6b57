package memapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/memoryhook/pgstore"
	"github.com/ctxproxy/ctxproxy/policy"
)

const (
	admin    = "admin-secret"
	acmeOp   = "acme-operator-secret"
	globexOp = "globex-operator-secret"
	defOp    = "default-operator-secret"
)

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

type fixture struct {
	t     *testing.T
	srv   *httptest.Server
	st    memoryhook.Governed
	pols  *policy.Store
	audit *Audit
}

// stores runs fn against the file store and the PostgreSQL store.
func stores(t *testing.T, fn func(t *testing.T, open func(t *testing.T) *fixture)) {
	t.Run("file store", func(t *testing.T) { fn(t, func(t *testing.T) *fixture { return newFixtureOn(t, nil) }) })
	t.Run("postgres store", func(t *testing.T) {
		fn(t, func(t *testing.T) *fixture {
			db := pgtest.New(t, "memapi_test")
			st, err := pgstore.Open(context.Background(), db.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return newFixtureOn(t, st)
		})
	})
}

func newFixture(t *testing.T) *fixture { return newFixtureOn(t, nil) }

// newFixtureOn serves the API over st (nil: a file store of its own).
func newFixtureOn(t *testing.T, st memoryhook.Governed) *fixture {
	return newFixtureWith(t, st, nil, nil)
}

// newFixtureWith is newFixtureOn with more policy files and the users of
// the tenants' keys.
func newFixtureWith(t *testing.T, st memoryhook.Governed, more map[string]string, users func(context.Context, string) ([]string, error)) *fixture {
	t.Helper()
	dir := t.TempDir()
	pdir := filepath.Join(dir, "policies")
	os.MkdirAll(pdir, 0o755)
	files := map[string]string{
		"acme.yaml":   "tenant: acme\noperator_tokens_sha256: [" + hash(acmeOp) + "]\nmemory:\n  mode: proxy\n",
		"globex.yaml": "tenant: globex\noperator_tokens_sha256: [" + hash(globexOp) + "]\n",
		"default.yaml": "tenant: default\noperator_tokens_sha256: [" + hash(defOp) + "]\nmemory:\n  mode: proxy\n" +
			"  history: { keep_days: 0 }\n",
	}
	for name, body := range more {
		files[name] = body
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(pdir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pols, err := policy.NewStore(pdir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if st == nil {
		fst, err := memoryhook.NewFileStore(filepath.Join(dir, "mem"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fst.Close() })
		st = fst
	}
	audit, err := OpenAudit(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	srv := httptest.NewServer(New(Config{Store: st, Policies: pols, AdminToken: admin, Audit: audit, Users: users}))
	t.Cleanup(srv.Close)
	return &fixture{t: t, srv: srv, st: st, pols: pols, audit: audit}
}

// do sends a request with token as x-api-key; it returns status and body.
func (f *fixture) do(token, method, path, body string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("x-api-key", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) ok(token, method, path, body string) gjson.Result {
	f.t.Helper()
	st, b := f.do(token, method, path, body)
	if st != 200 {
		f.t.Fatalf("%s %s: %d %s", method, path, st, b)
	}
	return gjson.Parse(b)
}

func (f *fixture) model(tenant, req, in string) {
	f.t.Helper()
	sc := memoryhook.Scope{Tenant: tenant, Actor: memoryhook.Actor{Type: memoryhook.ActorModel, KeyID: "0123abcd", RequestID: req, MessageID: "msg_" + req}}
	if r := memoryhook.Exec(context.Background(), f.st, sc, []byte(in)); r.IsError {
		f.t.Fatalf("%s: %s", in, r.Content)
	}
}

func TestAuthorisation(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, token, path string
		status            int
		errType           string
	}{
		{"no token is 401", "", "/v1/memory_stores", 401, "authentication_error"},
		{"a wrong token is 401", "nope", "/v1/memory_stores", 401, "authentication_error"},
		{"a tenant token reads its own store", acmeOp, "/v1/memory_stores/memstore_acme/memories", 200, ""},
		{"a tenant token does not see another tenant's store", acmeOp, "/v1/memory_stores/memstore_globex/memories", 404, "not_found_error"},
		{"the admin token sees every store", admin, "/v1/memory_stores/memstore_globex/memories", 200, ""},
		{"an unknown store is 404", admin, "/v1/memory_stores/memstore_nope", 404, "not_found_error"},
		{"stores are not created through the API", admin, "/v1/memory_stores/memstore_acme/archive", 400, "invalid_request_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodGet
			if strings.HasSuffix(tc.path, "/archive") {
				method = http.MethodPost
			}
			st, body := f.do(tc.token, method, tc.path, "")
			if st != tc.status || gjson.Get(body, "error.type").Str != tc.errType {
				t.Errorf("%d %s", st, body)
			}
		})
	}
	t.Run("a tenant token lists only its own store", func(t *testing.T) {
		got := f.ok(acmeOp, "GET", "/v1/memory_stores", "").Get("data.#.id").Raw
		if got != `["memstore_acme"]` {
			t.Errorf("stores %s", got)
		}
	})
	t.Run("a bearer token works as x-api-key does", func(t *testing.T) {
		req, _ := http.NewRequest("GET", f.srv.URL+"/v1/memory_stores/memstore_acme", nil)
		req.Header.Set("Authorization", "Bearer "+acmeOp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		resp.Body.Close()
	})
}

func TestListingPrefixDepthAndPages(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"a.md", "notes/b.md", "notes/deep/c.md", "notes/deep/d.md", "notes-archive/e.md"} {
		f.model("acme", "r", `{"command":"create","path":"/memories/`+p+`","file_text":"x"}`)
	}
	const base = "/v1/memory_stores/memstore_acme/memories"
	for _, tc := range []struct{ name, query, want string }{
		{"everything by path", "", `["/a.md","/notes-archive/e.md","/notes/b.md","/notes/deep/c.md","/notes/deep/d.md"]`},
		{"a prefix matches whole segments", "?path_prefix=/notes/", `["/notes/b.md","/notes/deep/c.md","/notes/deep/d.md"]`},
		{"depth 1 rolls deeper memories into prefixes", "?path_prefix=/notes/&depth=1", `["/notes/b.md","/notes/deep/"]`},
		{"depth 1 at the root", "?depth=1", `["/a.md","/notes-archive/","/notes/"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.ok(admin, "GET", base+tc.query, "").Get("data.#.path").Raw; got != tc.want {
				t.Errorf("got %s want %s", got, tc.want)
			}
		})
	}
	t.Run("pages follow next_page to the end", func(t *testing.T) {
		var all []string
		q := "?limit=2"
		for i := 0; i < 10; i++ {
			page := f.ok(admin, "GET", base+q, "")
			for _, p := range page.Get("data.#.path").Array() {
				all = append(all, p.Str)
			}
			if page.Get("next_page").Type == gjson.Null {
				break
			}
			q = "?limit=2&page=" + page.Get("next_page").Str
		}
		if strings.Join(all, " ") != "/a.md /notes-archive/e.md /notes/b.md /notes/deep/c.md /notes/deep/d.md" {
			t.Errorf("paged: %v", all)
		}
	})
	t.Run("full view pages hold at most 20", func(t *testing.T) {
		if st, body := f.do(admin, "GET", base+"?view=full&limit=21", ""); st != 400 {
			t.Errorf("%d %s", st, body)
		}
		if got := f.ok(admin, "GET", base+"?view=full&limit=1", "").Get("data.0.content").Str; got != "x" {
			t.Errorf("content %q", got)
		}
	})
}

func TestConflictsAndPreconditions(t *testing.T) { stores(t, testConflictsAndPreconditions) }

func testConflictsAndPreconditions(t *testing.T, open func(t *testing.T) *fixture) {
	f := open(t)
	const base = "/v1/memory_stores/memstore_acme/memories"
	m := f.ok(acmeOp, "POST", base, `{"path":"/notes/a.md","content":"one"}`)
	id := m.Get("id").Str
	for _, tc := range []struct{ name, body, conflictID, conflictPath string }{
		{"a taken path", `{"path":"/notes/a.md","content":"x"}`, id, "/notes/a.md"},
		{"a memory as ancestor", `{"path":"/notes/a.md/b.md","content":"x"}`, id, "/notes/a.md"},
		{"a directory", `{"path":"/notes","content":"x"}`, "", "/notes"},
	} {
		t.Run("create onto "+tc.name+" is a path conflict", func(t *testing.T) {
			st, body := f.do(acmeOp, "POST", base, tc.body)
			e := gjson.Get(body, "error")
			if st != 409 || e.Get("type").Str != "memory_path_conflict_error" || e.Get("conflicting_memory_id").Str != tc.conflictID ||
				e.Get("conflicting_path").Str != tc.conflictPath {
				t.Errorf("%d %s", st, body)
			}
		})
	}
	t.Run("bad paths are 400", func(t *testing.T) {
		for _, p := range []string{"notes/x.md", "/notes/", "/a//b", "/../x", "/a\u202eb"} {
			body, _ := json.Marshal(map[string]string{"path": p, "content": "x"})
			if st, b := f.do(acmeOp, "POST", base, string(body)); st != 400 {
				t.Errorf("%q: %d %s", p, st, b)
			}
		}
	})
	t.Run("an update with the current content succeeds whatever the precondition", func(t *testing.T) {
		got := f.ok(acmeOp, "POST", base+"/"+id, `{"content":"one","precondition":{"type":"content_sha256","content_sha256":"`+hash("other")+`"}}`)
		if got.Get("memory_version_id").Str != m.Get("memory_version_id").Str {
			t.Errorf("a version was added: %s", got.Raw)
		}
	})
	t.Run("a rename keeps the id and honours the precondition", func(t *testing.T) {
		st, body := f.do(acmeOp, "POST", base+"/"+id, `{"path":"/moved.md","precondition":{"type":"content_sha256","content_sha256":"`+hash("other")+`"}}`)
		if st != 409 || gjson.Get(body, "error.type").Str != "memory_precondition_failed_error" {
			t.Errorf("%d %s", st, body)
		}
		got := f.ok(acmeOp, "POST", base+"/"+id, `{"path":"/moved.md","precondition":{"type":"content_sha256","content_sha256":"`+hash("one")+`"}}`)
		if got.Get("id").Str != id || got.Get("path").Str != "/moved.md" {
			t.Errorf("renamed: %s", got.Raw)
		}
	})
}

// An operator's restore never silently overwrites a write the model made
// after the operator read the memory: one of the two wins whole, and the
// model's write is always a version.
func TestRestoreRacesModelWrites(t *testing.T) { stores(t, testRestoreRacesModelWrites) }

func testRestoreRacesModelWrites(t *testing.T, open func(t *testing.T) *fixture) {
	f := open(t)
	f.model("acme", "r1", `{"command":"create","path":"/memories/p.md","file_text":"clean"}`)
	f.model("acme", "r2", `{"command":"str_replace","path":"/memories/p.md","old_str":"clean","new_str":"poison"}`)
	vs := f.ok(admin, "GET", "/v1/memory_stores/memstore_acme/memory_versions", "").Get("data")
	memID, cleanVer := vs.Get("1.memory_id").Str, vs.Get("1.id").Str
	restore := "/v1/memory_stores/memstore_acme/memories/" + memID + "/restore"
	t.Run("a restore against a stale sha is refused and changes nothing", func(t *testing.T) {
		st, body := f.do(admin, "POST", restore, `{"version_id":"`+cleanVer+`","precondition":{"content_sha256":"`+hash("clean")+`"}}`)
		if st != 409 || gjson.Get(body, "error.type").Str != "memory_precondition_failed_error" {
			t.Errorf("%d %s", st, body)
		}
	})
	t.Run("racing a model write, no write is lost", func(t *testing.T) {
		var wg sync.WaitGroup
		var status int
		wg.Add(2)
		go func() {
			defer wg.Done()
			status, _ = f.do(admin, "POST", restore, `{"version_id":"`+cleanVer+`","precondition":{"content_sha256":"`+hash("poison")+`"}}`)
		}()
		go func() {
			defer wg.Done()
			// Refused ("did not appear verbatim") when the restore came first.
			sc := memoryhook.Scope{Tenant: "acme", Actor: memoryhook.Actor{Type: memoryhook.ActorModel, RequestID: "r3"}}
			memoryhook.Exec(context.Background(), f.st, sc, []byte(`{"command":"str_replace","path":"/memories/p.md","old_str":"poison","new_str":"poison2"}`))
		}()
		wg.Wait()
		ops := f.ok(admin, "GET", "/v1/memory_stores/memstore_acme/memory_versions?memory_id="+memID+"&view=full", "")
		contents := ops.Get("data.#.content").Raw
		head := f.ok(admin, "GET", "/v1/memory_stores/memstore_acme/memories/"+memID, "").Get("content").Str
		switch {
		case status == 200 && contents == `["poison2","clean","poison","clean"]`:
			// The restore came second: it was made against "poison" and still
			// matched, so the model's write ran first... impossible: r3 needs "poison".
			t.Errorf("restore after the model's write matched a stale sha: %s", contents)
		case status == 200 && head == "clean":
			// The restore won; the model's str_replace found no "poison" and wrote nothing.
		case status == 409 && head == "poison2":
			// The model won; the restore was refused.
		default:
			t.Errorf("restore %d, head %q, versions %s", status, head, contents)
		}
	})
}

func TestVersionsRedactDiffExportImportPurgeAudit(t *testing.T) {
	stores(t, testVersionsRedactDiffExportImportPurgeAudit)
}

func testVersionsRedactDiffExportImportPurgeAudit(t *testing.T, open func(t *testing.T) *fixture) {
	f := open(t)
	const s = "/v1/memory_stores/memstore_acme"
	f.model("acme", "r1", `{"command":"create","path":"/memories/p.md","file_text":"a\nb\n"}`)
	f.model("acme", "r2", `{"command":"str_replace","path":"/memories/p.md","old_str":"b","new_str":"secret"}`)
	f.model("acme", "r3", `{"command":"str_replace","path":"/memories/p.md","old_str":"secret","new_str":"c"}`)
	vs := f.ok(admin, "GET", s+"/memory_versions", "").Get("data")
	head, secret := vs.Get("0.id").Str, vs.Get("1.id").Str
	t.Run("a version carries the model's actor", func(t *testing.T) {
		got := f.ok(admin, "GET", s+"/memory_versions/"+secret, "")
		if got.Get("created_by").Raw != `{"type":"api_actor","api_key_id":"0123abcd","request_id":"r2","upstream_message_id":"msg_r2"}` ||
			got.Get("content").Str != "a\nsecret\n" || got.Get("path").Str != "/p.md" {
			t.Errorf("%s", got.Raw)
		}
	})
	t.Run("filters: request, key, operation", func(t *testing.T) {
		for q, want := range map[string]int{"?request_id=r2": 1, "?api_key_id=0123abcd": 3, "?api_key_id=ffffffff": 0, "?operation=created": 1} {
			if n := len(f.ok(admin, "GET", s+"/memory_versions"+q, "").Get("data").Array()); n != want {
				t.Errorf("%s: %d versions, want %d", q, n, want)
			}
		}
	})
	t.Run("diff against the version before", func(t *testing.T) {
		got := f.ok(admin, "GET", s+"/memory_versions/"+head+"/diff", "").Get("diff").Str
		if got != "  a\n- secret\n+ c\n" {
			t.Errorf("diff %q", got)
		}
	})
	t.Run("redact clears the content, never the head", func(t *testing.T) {
		if st, body := f.do(admin, "POST", s+"/memory_versions/"+head+"/redact", ""); st != 400 {
			t.Errorf("head: %d %s", st, body)
		}
		got := f.ok(acmeOp, "POST", s+"/memory_versions/"+secret+"/redact", "")
		if got.Get("content").Type != gjson.Null || got.Get("path").Type != gjson.Null || got.Get("redacted_by.service_account_id").Str != "op-"+hash(acmeOp)[:8] ||
			got.Get("created_by.request_id").Str != "r2" {
			t.Errorf("%s", got.Raw)
		}
		if strings.Contains(f.exportAll(s), "secret") {
			t.Error("the export still holds the redacted content")
		}
	})
	t.Run("export and import into another store", func(t *testing.T) {
		exp := f.exportAll(s)
		st, body := f.do(admin, "POST", "/v1/memory_stores/memstore_globex/import", exp)
		if st != 200 || gjson.Get(body, "created").Int() != 1 || gjson.Get(body, "skipped_versions").Int() != 3 {
			t.Fatalf("%d %s", st, body)
		}
		got := f.ok(admin, "GET", "/v1/memory_stores/memstore_globex/memories?view=full", "").Get("data.0")
		if got.Get("path").Str != "/p.md" || got.Get("content").Str != "a\nc\n" {
			t.Errorf("imported: %s", got.Raw)
		}
	})
	t.Run("purge wants the store named, then leaves nothing", func(t *testing.T) {
		if st, _ := f.do(admin, "POST", s+"/purge", `{}`); st != 400 {
			t.Errorf("purge without confirm: %d", st)
		}
		got := f.ok(admin, "POST", s+"/purge", `{"confirm":"memstore_acme"}`)
		if got.Get("files").Int() != 1 || got.Get("versions").Int() != 3 {
			t.Errorf("purge: %s", got.Raw)
		}
		if n := len(f.ok(admin, "GET", s+"/memory_versions", "").Get("data").Array()); n != 0 {
			t.Errorf("%d versions after purge", n)
		}
		if n := len(f.ok(admin, "GET", s+"/memories", "").Get("data").Array()); n != 0 {
			t.Errorf("%d memories after purge", n)
		}
	})
	t.Run("the audit log lists the operator calls of the store, newest first", func(t *testing.T) {
		got := f.ok(acmeOp, "GET", s+"/audit", "").Get("data")
		first := got.Get("0") // the call before this one: a listing's record is written after it answers
		if first.Get("path").Str != s+"/memories" || first.Get("method").Str != "GET" {
			t.Errorf("newest: %s", first.Raw)
		}
		var redact gjson.Result
		for _, r := range got.Array() {
			if strings.HasSuffix(r.Get("path").Str, "/redact") && r.Get("status").Int() == 200 {
				redact = r
			}
		}
		if redact.Get("operator").Str != "op-"+hash(acmeOp)[:8] || redact.Get("version_id").Str != secret {
			t.Errorf("redact record: %s\nall: %s", redact.Raw, got.Raw)
		}
		for _, r := range got.Array() {
			if r.Get("tenant").Str != "acme" {
				t.Errorf("record of another store: %s", r.Raw)
			}
		}
	})
}

func (f *fixture) exportAll(store string) string {
	f.t.Helper()
	st, body := f.do(admin, "GET", store+"/export?history=true", "")
	if st != 200 {
		f.t.Fatalf("export: %d %s", st, body)
	}
	return body
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct{ name, a, b, want string }{
		{"from nothing", "", "x\n", "+ x\n"},
		{"to nothing", "x\n", "", "- x\n"},
		{"a change in the middle", "a\nb\nc\n", "a\nB\nc\n", "  a\n- b\n+ B\n  c\n"},
		{"the same", "a\n", "a\n", "  a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Diff(tc.a, tc.b); got != tc.want {
				t.Errorf("got %q want %q", got, tc.want)
			}
		})
	}
}

func TestDefaultTenantKeyStores(t *testing.T) { stores(t, testDefaultTenantKeyStores) }

// Each key's store of the default tenant is a store of the API: listed and
// served to the admin and the default tenant's operators only, purged on
// its own, and pruned by the default tenant's retention.
func testDefaultTenantKeyStores(t *testing.T, open func(t *testing.T) *fixture) {
	f := open(t)
	ctx := context.Background()
	for _, store := range []string{"default~0123abcd", "default~0123abcd", "default~89abcdef"} {
		sc := memoryhook.Scope{Tenant: store, Actor: memoryhook.Actor{Type: memoryhook.ActorModel, KeyID: store[8:]}}
		in := `{"command":"create","path":"/memories/a.md","file_text":"` + store + `"}`
		if r := memoryhook.Exec(ctx, f.st, sc, []byte(in)); r.IsError {
			in = `{"command":"str_replace","path":"/memories/a.md","old_str":"default","new_str":"again"}`
			if r := memoryhook.Exec(ctx, f.st, sc, []byte(in)); r.IsError {
				t.Fatal(r.Content)
			}
		}
	}
	want := `["memstore_default","memstore_default~0123abcd","memstore_default~89abcdef"]`
	for _, tok := range []string{admin, defOp} {
		if got := gjson.Get(f.ok(tok, "GET", "/v1/memory_stores", "").Raw, `data.#(name%"default*")#.id`).Raw; got != want {
			t.Errorf("stores listed to %s: %s", tok, got)
		}
	}
	if got := f.ok(acmeOp, "GET", "/v1/memory_stores", "").Get("data.#.id").Raw; got != `["memstore_acme"]` {
		t.Errorf("stores listed to acme: %s", got)
	}
	const s = "/v1/memory_stores/memstore_default~0123abcd"
	if st, _ := f.do(acmeOp, "GET", s+"/memories", ""); st != 404 {
		t.Errorf("acme's operator sees a default key's store: %d", st)
	}
	if got := f.ok(defOp, "GET", s+"/memories?view=full", "").Get("data.#.content").Raw; got != `["again~0123abcd"]` {
		t.Errorf("the key's memories: %s", got)
	}
	if n := PruneAll(ctx, f.st, f.pols, zap.NewNop()); n != 1 {
		t.Errorf("pruned %d versions, want the key store's older one", n)
	}
	f.ok(defOp, "POST", s+"/purge", `{"confirm":"memstore_default~0123abcd"}`)
	if got := gjson.Get(f.ok(admin, "GET", "/v1/memory_stores", "").Raw, `data.#(name%"default*")#.id`).Raw; got != `["memstore_default","memstore_default~89abcdef"]` {
		t.Errorf("stores after the purge: %s", got)
	}
	if got := f.ok(admin, "GET", "/v1/memory_stores/memstore_default~89abcdef/memories?view=full", "").Get("data.#.content").Raw; got != `["default~89abcdef"]` {
		t.Errorf("the other key's memories: %s", got)
	}
}
