package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/testwait"
	"github.com/ctxproxy/ctxproxy/stack"
)

// largeFileBytes is the file planted in a tenant's folder: sparse, so it
// costs no disk, and far over any bound on the proxy's memory.
const largeFileBytes = 3 << 30

// procStatusKB reads a field of /proc/PID/status in kB.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// A 3 GB file in a tenant's folder (here planted; or written before the
// limit was lowered), through the built binary: the model's view lists it,
// reading and editing it are refused in the limit's sentence, the history
// adopts it when it loads (here on the model's delete of another file)
// without reading it, the operator API lists it and refuses its content
// with a sentence, and the proxy's peak RSS stays within 64 MiB of what it
// was before.
func TestBinaryLargeMemoryFileIsNeverReadWhole(t *testing.T) {
	const admin = "large-admin-token"
	const globexKey = "sk-ant-globex-large"
	t.Setenv("CTXPROXY_ADMIN_TOKEN", admin)
	fake, upURL := fakeUpstream(t)
	pols, mem, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml":    stack.TenantPolicy("acme", binKey, "memory:\n  mode: proxy\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", mem,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	const ask = `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

	// The same work on an ordinary tenant first: the baseline.
	fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{
			fakeapi.MemoryCreate("/memories/notes.md", "warm\n"),
			fakeapi.MemoryView("/memories"),
			fakeapi.MemoryDelete("/memories/notes.md"),
		}},
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}},
	))
	if resp, body := send(t, p.Addr, "/v1/messages", ask); resp.StatusCode != 200 {
		t.Fatalf("warm-up: %d %.300s", resp.StatusCode, body)
	}
	if st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_acme/memories", ""); st != 200 {
		t.Fatalf("warm-up list: %d %.300s", st, body)
	}
	baseline := procStatusKB(t, p.Pid(), "VmHWM")

	// Then a tenant whose folder holds the large file, added by a policy
	// reload so that nothing has loaded its history yet.
	dir := filepath.Join(mem, "globex")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(largeFileBytes); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "notes.md"), []byte("small\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pols, "globex.yaml"), []byte(stack.TenantPolicy("globex", globexKey, "memory:\n  mode: proxy\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, "the policy reload adding globex", func() {
		for {
			if st, _ := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_globex", ""); st == 200 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	fake.SetResponder(fakeapi.Script(
		fakeapi.Reply{Content: []json.RawMessage{
			fakeapi.MemoryView("/memories"),
			fakeapi.MemoryView("/memories/big.bin"),
			fakeapi.MemoryStrReplace("/memories/big.bin", "a", "b"),
			fakeapi.MemoryDelete("/memories/notes.md"),
		}},
		fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}},
	))
	before := len(proxiedCalls(fake))
	resp, body := sendAs(t, p.Addr, globexKey, "/v1/messages", ask)
	if resp.StatusCode != 200 || gjson.Get(body, "content.0.text").Str != "done" {
		t.Fatalf("status %d body %.300s", resp.StatusCode, body)
	}
	reqs := proxiedCalls(fake)[before:]
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	results := gjson.GetBytes(reqs[1].Messages[len(reqs[1].Messages)-1], "content").Array()
	refused := "Error: File /memories/big.bin is 3221225472 bytes; the limit is 1048576 bytes."
	want := []string{"3G\t/memories/big.bin", refused, refused, "Successfully deleted /memories/notes.md"}
	if len(results) != len(want) {
		t.Fatalf("%d tool_results: %.300s", len(results), reqs[1].Messages[len(reqs[1].Messages)-1])
	}
	for i, w := range want {
		if c := results[i].Get("content").Str; !strings.Contains(c, w) {
			t.Errorf("tool_result %d: %.300q, want it to hold %q", i, c, w)
		}
	}

	st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_globex/memories", "")
	big := gjson.Get(body, `data.#(path=="/big.bin")`)
	if st != 200 || big.Get("content_size_bytes").Int() != largeFileBytes {
		t.Fatalf("list: %d %.300s", st, body)
	}
	st, body = operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_globex/memories/"+big.Get("id").Str+"?view=full", "")
	if st != 400 || !strings.Contains(gjson.Get(body, "error.message").Str, "over the tenant's max_file_bytes") {
		t.Errorf("full view of big.bin: %d %.300s", st, body)
	}
	if st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_globex/export?history=true", ""); st != 200 || len(body) > 64<<10 {
		t.Errorf("export: %d, %d bytes", st, len(body))
	}

	peak := procStatusKB(t, p.Pid(), "VmHWM")
	if grew := peak - baseline; grew > 64<<10 {
		t.Errorf("peak RSS grew by %d MiB (baseline %d MiB, peak %d MiB), want at most 64 MiB", grew>>10, baseline>>10, peak>>10)
	}
	t.Logf("peak RSS %d MiB, %d KiB over the baseline", peak>>10, peak-baseline)
}
