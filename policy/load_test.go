package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// Load golden files: text sections "-- NAME --" are files written into a fresh folder, and "want" is
// what LoadDir says about it: every LoadError as "file:line: problem" (file relative to the folder),
// or "ok" and one Summary line per tenant.
func TestLoadGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/load/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			g := readGolden(t, path)
			dir := t.TempDir()
			for _, name := range g.names {
				if name == "want" {
					continue
				}
				content := g.sections[name]
				if content != "" {
					content += "\n"
				}
				// A name with a '/' is a file in a folder (a memory template).
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := describeLoad(t, dir)
			if *update {
				g.set("want", got)
				g.write(t)
				return
			}
			if want := g.sections["want"]; got != want {
				t.Errorf("LoadDir:\n got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func describeLoad(t *testing.T, dir string) string {
	t.Helper()
	set, err := LoadDir(dir)
	prefix := dir + string(filepath.Separator)
	if err != nil {
		var le LoadErrors
		if !errors.As(err, &le) {
			t.Fatalf("LoadDir error %v is not LoadErrors", err)
		}
		if set != nil {
			t.Fatal("LoadDir returned a Set with errors")
		}
		return strings.ReplaceAll(le.Error(), prefix, "")
	}
	lines := []string{"ok"}
	for _, p := range set.Tenants() {
		lines = append(lines, strings.ReplaceAll(p.Summary(), prefix, ""))
	}
	return strings.Join(lines, "\n")
}

func TestLoadDefaults(t *testing.T) {
	p := mustParse(t, "tenant: bare\n")
	if p.ContextManagement.Mode != CMDefault || p.Memory.Mode != MemoryOff {
		t.Errorf("modes: got %s/%s, want default/off", p.ContextManagement.Mode, p.Memory.Mode)
	}
	if p.ContextManagement.ClearThinking != nil || p.ContextManagement.ClearToolUses != nil {
		t.Error("a policy without edit blocks must add no edits")
	}
	if p.Memory.MaxIterations != 10 {
		t.Errorf("max_iterations: got %d, want 10", p.Memory.MaxIterations)
	}
	want := memoryhook.Limits{MaxFileBytes: 1 << 20, MaxTenantBytes: 64 << 20, MaxFiles: 10000, MaxViewChars: 100000}
	if p.Memory.Limits != want {
		t.Errorf("limits: got %+v, want %+v", p.Memory.Limits, want)
	}
	if p.Upstream != (Upstream{Retries: 0, RetryBaseDelay: 200 * time.Millisecond, RetryMaxDelay: 5 * time.Second}) {
		t.Errorf("upstream: got %+v", p.Upstream)
	}
}

func TestLoadFullPolicy(t *testing.T) {
	p := mustParse(t, `tenant: acme
api_keys_sha256: ["0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"]
context_management:
  mode: enforce
  clear_thinking:
    keep: { type: thinking_turns, value: 2 }
  clear_tool_uses:
    trigger: { type: tool_uses, value: 20 }
    keep: { value: 4 }
    clear_at_least: { type: input_tokens, value: 5000 }
    exclude_tools: [web_search, memory]
    clear_tool_inputs: [bash]
memory:
  mode: inject
  max_iterations: 3
  limits: { max_file_bytes: 10, max_total_bytes: 20, max_files: 30, max_view_chars: 40 }
upstream: { retries: 2, retry_base_delay: 1s, retry_max_delay: 3s }
`)
	if len(p.KeyHashes) != 1 || p.KeyHashes[0][0] != 0x01 || p.KeyHashes[0][7] != 0xef {
		t.Errorf("key hash: %x", p.KeyHashes)
	}
	if got := string(p.clearThinkingJSON); got != `{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":2}}` {
		t.Errorf("clear_thinking: %s", got)
	}
	want := `{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":20},"keep":{"type":"tool_uses","value":4},"clear_at_least":{"type":"input_tokens","value":5000},"exclude_tools":["web_search","memory"],"clear_tool_inputs":["bash"]}`
	if got := string(p.clearToolUsesJSON); got != want {
		t.Errorf("clear_tool_uses:\n got %s\nwant %s", got, want)
	}
	if p.Memory.MaxIterations != 3 || p.Memory.Limits != (memoryhook.Limits{MaxFileBytes: 10, MaxTenantBytes: 20, MaxFiles: 30, MaxViewChars: 40}) {
		t.Errorf("memory: %+v", p.Memory)
	}
	if u := p.Upstream; u.Retries != 2 || u.RetryBaseDelay != time.Second || u.RetryMaxDelay != 3*time.Second {
		t.Errorf("upstream: %+v", p.Upstream)
	}
}

func TestKeepAllForms(t *testing.T) {
	for yaml, want := range map[string]string{
		"keep: all":                              `{"type":"clear_thinking_20251015","keep":"all"}`,
		"keep: {type: all}":                      `{"type":"clear_thinking_20251015","keep":{"type":"all"}}`,
		"{}":                                     `{"type":"clear_thinking_20251015"}`,
		"keep: {type: thinking_turns, value: 1}": `{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}`,
	} {
		body := "tenant: t\ncontext_management:\n  clear_thinking:\n    " + yaml + "\n"
		if yaml == "{}" {
			body = "tenant: t\ncontext_management:\n  clear_thinking: {}\n"
		}
		p := mustParse(t, body)
		if got := string(p.clearThinkingJSON); got != want {
			t.Errorf("%s: got %s, want %s", yaml, got, want)
		}
	}
}

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "default.yaml", "tenant: default\n")
	write(t, dir, "acme.yaml", "tenant: acme\napi_keys_sha256: ["+hexHash("key-a")+"]\n")
	write(t, dir, "globex.yaml", "tenant: globex\napi_keys_sha256:\n  - "+strings.ToUpper(hexHash("key-g"))+"\n  - "+hexHash("key-g2")+"\n")
	set, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"key-a": "acme", "key-g": "globex", "key-g2": "globex"} {
		p, ok := set.Lookup(key)
		if !ok || p.Tenant != want {
			t.Errorf("Lookup(%s) = %v, %v; want %s", key, p, ok, want)
		}
	}
	if p, ok := set.Lookup("key-a "); ok || p != set.Default() {
		t.Errorf("a near miss must not match: %v %v", p, ok)
	}
	if p, ok := set.Lookup(""); ok || p.Tenant != "default" {
		t.Errorf("empty key: %v %v", p, ok)
	}
	// Even a set that somehow indexed the sha256 of nothing never matches a missing key.
	odd, _ := newSet([]*Policy{{Tenant: "odd", KeyHashes: [][32]byte{apikey.Hash("")}}})
	if p, ok := odd.Lookup(""); ok || p != nil {
		t.Errorf("empty key matched tenant %v", p)
	}
	var names []string
	for _, p := range set.Tenants() {
		names = append(names, p.Tenant)
	}
	if strings.Join(names, ",") != "acme,default,globex" {
		t.Errorf("Tenants: %v", names)
	}
	if set.Tenant("acme") == nil || set.Tenant("nope") != nil {
		t.Error("Tenant by name")
	}

	// Without default.yaml, unknown keys get no policy.
	os.Remove(filepath.Join(dir, "default.yaml"))
	set, err = LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := set.Lookup("nobody"); ok || p != nil || set.Default() != nil {
		t.Errorf("no default: %v %v", p, ok)
	}
}

func hexHash(key string) string {
	h := apikey.Hash(key)
	const digits = "0123456789abcdef"
	b := make([]byte, 64)
	for i, c := range h {
		b[2*i], b[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(b)
}

func write(t testing.TB, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
