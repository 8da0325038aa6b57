package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/stack"
)

// operatorCall sends an operator API request with token and returns the
// status and body.
func operatorCall(t *testing.T, addr, token, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// One operator call with a 600 KB memory id in its URL, and lines of the
// audit log no listing can read (a 2 MiB line, a torn one), through the
// built binary: the record is written with its fields cut, and every
// tenant's audit listing still answers, skipping and counting what it
// cannot read.
func TestBinaryAuditListingSurvivesLongRecordsAndUnreadableLines(t *testing.T) {
	const admin = "audit-admin-token"
	t.Setenv("CTXPROXY_ADMIN_TOKEN", admin)
	pols, mem, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml":    stack.TenantPolicy("acme", binKey, "memory:\n  mode: proxy\n"),
		"globex.yaml":  stack.TenantPolicy("globex", "sk-ant-globex-audit", "memory:\n  mode: proxy\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "memory-audit.jsonl")
	planted := strings.Repeat("x", 2<<20) + "\n" + `{"time":"2026-01-01T00:00:00Z","tenant":"acme"` + "\n"
	if err := os.WriteFile(audit, []byte(planted), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--policies", pols, "--memory-dir", mem, "--memory-audit", audit,
		"--ledger", "file:"+filepath.Join(t.TempDir(), "ledger.jsonl"))

	longID := "mem_" + strings.Repeat("a", 600<<10)
	if st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_acme/memories/"+longID, ""); st != 404 {
		t.Fatalf("long id: status %d, want 404: %.300s", st, body)
	}
	if st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_globex/memories", ""); st != 200 {
		t.Fatalf("globex list: status %d: %s", st, body)
	}

	for _, tenant := range []string{"acme", "globex"} {
		st, body := operatorCall(t, p.Addr, admin, "GET", "/v1/memory_stores/memstore_"+tenant+"/audit", "")
		if st != 200 {
			t.Fatalf("%s audit: status %d: %.300s", tenant, st, body)
		}
		if n := gjson.Get(body, "skipped_lines").Int(); n != 2 {
			t.Errorf("%s audit: skipped_lines %d, want 2 (the planted lines)", tenant, n)
		}
		recs := gjson.Get(body, "data").Array()
		if len(recs) != 1 {
			t.Fatalf("%s audit: %d records, want 1: %.500s", tenant, len(recs), body)
		}
		if tenant == "acme" {
			id, path := recs[0].Get("memory_id").Str, recs[0].Get("path").Str
			if !strings.HasPrefix(id, "mem_aaaa") || len(id) > 200 || !strings.Contains(id, "more bytes)") {
				t.Errorf("memory_id not cut to its bound: %d bytes, %.80q", len(id), id)
			}
			if !strings.HasPrefix(path, "/v1/memory_stores/memstore_acme/memories/mem_aaaa") || len(path) > 1100 {
				t.Errorf("path not cut to its bound: %d bytes", len(path))
			}
			if recs[0].Get("status").Int() != 404 {
				t.Errorf("record: %s", recs[0].Raw)
			}
		}
	}
	info, err := os.Stat(audit)
	if err != nil {
		t.Fatal(err)
	}
	if grown := info.Size() - int64(len(planted)); grown > 8<<10 {
		t.Errorf("two records grew the audit log by %d bytes", grown)
	}
}
