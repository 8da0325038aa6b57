package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// The shipped default.yaml, through the built binary: two keys no tenant
// lists each get memory, and neither's model reads what the other's wrote;
// the operator API lists and serves each key's store apart.
func TestBinaryShippedDefaultTenantKeepsStrangersMemoryApart(t *testing.T) {
	const admin = "default-admin-token"
	t.Setenv("CTXPROXY_ADMIN_TOKEN", admin)
	shipped, err := os.ReadFile("../../policies/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	pols, mem, err := stack.Layout(t.TempDir(), map[string]string{"default.yaml": string(shipped)})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", mem,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))
	const ask = `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	result := func(key string, call json.RawMessage) string {
		t.Helper()
		fake.SetResponder(fakeapi.Script(
			fakeapi.Reply{Content: []json.RawMessage{call}},
			fakeapi.Reply{Content: []json.RawMessage{fakeapi.Text("done")}},
		))
		before := len(proxiedCalls(fake))
		if resp, body := sendAs(t, p.Addr, key, "/v1/messages", ask); resp.StatusCode != 200 {
			t.Fatalf("status %d: %.300s", resp.StatusCode, body)
		}
		reqs := proxiedCalls(fake)[before:]
		if len(reqs) != 2 {
			t.Fatalf("%d upstream requests, want 2 (the memory call ran by the proxy)", len(reqs))
		}
		return gjson.GetBytes(reqs[1].Messages[len(reqs[1].Messages)-1], "content.0.content").Str
	}
	const alice, bob = "sk-ant-stranger-alice", "sk-ant-stranger-bob"
	if got := result(alice, fakeapi.MemoryCreate("/memories/secret.md", "alice salary 123k\n")); got != "File created successfully at: /memories/secret.md" {
		t.Fatalf("alice's create: %q", got)
	}
	if got := result(bob, fakeapi.MemoryView("/memories/secret.md")); got != "Error: The path /memories/secret.md does not exist. Please provide a valid path." {
		t.Errorf("bob read alice's memory: %q", got)
	}
	if got := result(bob, fakeapi.MemoryView("/memories")); strings.Contains(got, "secret") {
		t.Errorf("bob's listing shows alice's file: %q", got)
	}
	if got := result(alice, fakeapi.MemoryView("/memories/secret.md")); !strings.Contains(got, "alice salary 123k") {
		t.Errorf("alice's own memory: %q", got)
	}

	aliceStore, bobStore := "memstore_default~"+apikey.IDOf(alice), "memstore_default~"+apikey.IDOf(bob)
	st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores", "")
	ids := gjson.Get(body, "data.#.id").String()
	if st != 200 || !strings.Contains(ids, `"`+aliceStore+`"`) || !strings.Contains(ids, `"`+bobStore+`"`) || !strings.Contains(ids, `"memstore_default"`) {
		t.Errorf("stores: %d %s", st, ids)
	}
	st, body = operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/"+aliceStore+"/memories?view=full", "")
	if st != 200 || gjson.Get(body, "data.#").Int() != 1 || gjson.Get(body, "data.0.content").Str != "alice salary 123k\n" {
		t.Errorf("alice's store: %d %.300s", st, body)
	}
	for _, store := range []string{bobStore, "memstore_default"} {
		if st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/"+store+"/memories", ""); st != 200 || gjson.Get(body, "data.#").Int() != 0 {
			t.Errorf("%s: %d %.300s", store, st, body)
		}
	}
	if st, _ := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_default~nothex00/memories", ""); st != 404 {
		t.Errorf("a store name that is no key id: %d, want 404", st)
	}
}
