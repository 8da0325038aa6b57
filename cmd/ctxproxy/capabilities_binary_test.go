package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// capsModels is the fake's default table with three models of the test's own: one that takes
// every strategy and between_tools though no built-in list names it, one without context
// management, and claude-opus-4-8, which the built-in list compacts, made to say no to it.
func capsModels(opus48Compacts bool) []fakeapi.Model {
	models := fakeapi.DefaultModels()
	var all, none fakeapi.Model
	for i := range models {
		if models[i].ID == "claude-opus-4-8" {
			all, none = models[i], fakeapi.DefaultModels()[i] // none: capabilities of its own
			if !opus48Compacts {
				models[i].Capabilities = fakeapi.DefaultModels()[i].Capabilities
				models[i].Capabilities.ContextManagement.Compact = &fakeapi.Support{}
			}
		}
	}
	all.ID, all.Aliases = "claude-testbird-1", nil
	none.ID, none.Aliases = "claude-plainbird-1", nil
	none.Capabilities.ContextManagement = fakeapi.ContextManagementCapability{}
	return append(models, all, none)
}

// Through the binary against the fake: the edits a tenant gets follow what GET /v1/models says
// of the request's model, read with the tenant's own key at start and again when asked (the
// ten-minute read, here POST /debug/models/refresh), the built-in list deciding only while the
// endpoint cannot be read; a pass-through tenant is read with the first credential it forwards
// that the API takes.
func TestBinaryWritesTheEditsEachModelsCapabilitiesTake(t *testing.T) {
	fake := fakeapi.New(fakeapi.WithModels(capsModels(false)...))
	var modelsDown atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if modelsDown.Load() && strings.HasPrefix(r.URL.Path, "/v1/models") {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"api_error","message":"down"}}`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()

	const edits = "context_management:\n  mode: enforce\n  threads: pass\n  clear_thinking: {keep: all}\n" +
		"  clear_tool_uses: {trigger: {type: input_tokens, value: 30000}}\n  compact: {trigger: {type: input_tokens, value: 100000}}\nmemory:\n  mode: off\n"
	const passKey = "sk-ant-pass-through-client"
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"vault.yaml":   stack.TenantPolicy("vault", binKey, edits+"upstream:\n  api_key_env: CTXPROXY_E2E_VAULT_KEY\n"),
		"pass.yaml":    stack.TenantPolicy("pass", passKey, edits),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startVaultProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--debug-addr", "127.0.0.1:0")
	refresh := func(t *testing.T) {
		t.Helper()
		resp, err := http.Post("http://"+p.Addrs["debug listening"]+"/debug/models/refresh", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	editsOf := func(t *testing.T, key, model, thinking string) []string {
		t.Helper()
		body := `{"model":"` + model + `","max_tokens":2000,"thinking":` + thinking + `,"messages":[{"role":"user","content":"hi"}]}`
		resp, got := sendAs(t, p.Addr, key, "/v1/messages", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, got)
		}
		r, _ := fake.LastRequest("/v1/messages")
		var types []string
		for _, e := range gjson.GetBytes(r.Body, "context_management.edits").Array() {
			types = append(types, e.Get("type").Str)
		}
		return types
	}
	const on, off, between = `{"type":"enabled","budget_tokens":1024}`, `{"type":"disabled"}`, `{"type":"between_tools"}`
	all := []string{"clear_thinking_20251015", "clear_tool_uses_20250919", "compact_20260112"}
	noCompact := all[:2]

	t.Run("read with the tenant's own key at start, before any request", func(t *testing.T) {
		var creds []string
		for _, r := range fake.Requests() {
			if r.Path == "/v1/models" {
				creds = append(creds, r.Credential)
			}
		}
		if !slices.Contains(creds, e2eVaultKey) || slices.Contains(creds, passKey) {
			t.Errorf("models read with %q", creds)
		}
	})
	for _, tt := range []struct {
		name, model, thinking string
		want                  []string
	}{
		{"a model no built-in list names compacts where the endpoint says it does", "claude-testbird-1", on, all},
		{"a model without context management gets no edit", "claude-plainbird-1", on, nil},
		{"the endpoint's no beats the built-in list", "claude-opus-4-8", on, noCompact},
		{"haiku 5.5 does not compact", "claude-haiku-5-5", on, noCompact},
		{"between_tools is thinking where the model lists it", "claude-testbird-1", between, all},
		{"between_tools is no thinking where nothing is known of the model", "claude-sonnet-4-5", between, all[1:2]},
		{"a model the endpoint does not list follows the built-in list", "claude-sonnet-4-5", on, noCompact},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := editsOf(t, binKey, tt.model, tt.thinking); !slices.Equal(got, tt.want) {
				t.Errorf("edits %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("a changed capability is followed at the next read", func(t *testing.T) {
		fake.SetModels(capsModels(true))
		if got := editsOf(t, binKey, "claude-opus-4-8", off); !slices.Equal(got, []string{"clear_tool_uses_20250919"}) {
			t.Fatalf("before the read: %v", got)
		}
		refresh(t)
		if got := editsOf(t, binKey, "claude-opus-4-8", off); !slices.Equal(got, all[1:]) {
			t.Errorf("after the read: %v", got)
		}
		fake.SetModels(capsModels(false))
		refresh(t)
	})

	t.Run("a pass-through tenant is read with the first credential it forwards", func(t *testing.T) {
		// Not read yet: the built-in list compacts claude-opus-4-8, which the fake refuses.
		body := `{"model":"claude-opus-4-8","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
		if resp, got := sendAs(t, p.Addr, passKey, "/v1/messages", body); resp.StatusCode != 400 || !strings.Contains(got, "compact_20260112") {
			t.Fatalf("before its read: %d %s", resp.StatusCode, got)
		}
		// The first call the API takes offers the credential.
		if got := editsOf(t, passKey, "claude-sonnet-4-5", off); !slices.Equal(got, []string{"clear_tool_uses_20250919"}) {
			t.Fatalf("a model the endpoint does not list: %v", got)
		}
		refresh(t)
		if got := editsOf(t, passKey, "claude-opus-4-8", off); !slices.Equal(got, []string{"clear_tool_uses_20250919"}) {
			t.Errorf("after its read: %v", got)
		}
		read := false
		for _, r := range fake.Requests() {
			read = read || r.Path == "/v1/models" && r.Credential == passKey
		}
		if !read {
			t.Error("no models read with the pass-through tenant's credential")
		}
	})

	t.Run("while the endpoint cannot be read the built-in list decides", func(t *testing.T) {
		modelsDown.Store(true)
		// The last good read stands for an hour; a proxy started now has none.
		p2 := startVaultProxy(t, "--upstream", srv.URL, "--policies", pols, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+filepath.Join(t.TempDir(), "l2.jsonl"))
		body := `{"model":"claude-testbird-1","max_tokens":2000,"thinking":` + on + `,"messages":[{"role":"user","content":"hi"}]}`
		resp, got := sendAs(t, p2.Addr, binKey, "/v1/messages", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		r, _ := fake.LastRequest("/v1/messages")
		var types []string
		for _, e := range gjson.GetBytes(r.Body, "context_management.edits").Array() {
			types = append(types, e.Get("type").Str)
		}
		if !slices.Equal(types, noCompact) {
			t.Errorf("edits %v, want the built-in list's %v", types, noCompact)
		}
		if !strings.Contains(p2.Log(), "model capabilities") {
			t.Errorf("no log line says the models could not be read:\n%s", p2.Log())
		}
	})
}
