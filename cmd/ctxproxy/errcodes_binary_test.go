package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/stack"
)

// The December API's error codes reach the client as the upstream sent them (status, body,
// headers) on the plain, streamed and pass-through routes; the spend limits are never retried,
// even by a tenant that asked for retries and without x-should-retry: false, while
// ramp_limit_exceeded is retried as any 429; the console's Health page names each error by its
// error.type and code.
func TestBinaryRelaysErrorCodesAndNeverRetriesSpendLimits(t *testing.T) {
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml": stack.TenantPolicy("acme", binKey, "memory:\n  mode: off\n"+
			"upstream:\n  retries: 2\n  retry_base_delay: 1ms\n  retry_max_delay: 5ms\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", filepath.Join(t.TempDir(), "mem"),
		"--admin-token", consoleAdmin)

	tests := []struct {
		code   string
		status int
		typ    string
		calls  int // upstream calls for one client request: 1 + the tenant's 2 retries when retried
	}{
		{fakeapi.CodeContractSpendLimit, 429, "rate_limit_error", 1},
		{fakeapi.CodeEnforcedSpendLimit, 429, "rate_limit_error", 1},
		{fakeapi.CodeLinkedOrgSpendLimit, 402, "billing_error", 1},
		{fakeapi.CodeLinkedOrgBillingUnavailable, 402, "billing_error", 1},
		{fakeapi.CodeRampLimit, 429, "rate_limit_error", 3},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.code + " plain"
			if stream {
				name = tt.code + " streamed"
			}
			t.Run(name, func(t *testing.T) {
				fake.Reset()
				want := fakeapi.ErrorCodeReply(tt.code)
				fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
					r := fakeapi.ErrorCodeReply(tt.code)
					r.Header = http.Header{"Retry-After": {"0"}, "X-Should-Retry": {"true"}, "X-Upstream-Said": {"kept"}}
					return r
				})
				body := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
				if stream {
					body = `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
				}
				resp, got := send(t, p.Addr, "/v1/messages", body)
				if resp.StatusCode != tt.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, got)
				}
				e := gjson.Get(got, "error")
				if e.Get("details.error_code").Str != tt.code || e.Get("type").Str != tt.typ || e.Get("message").Str != want.Error.Message {
					t.Errorf("body changed: %s", got)
				}
				if resp.Header.Get("Retry-After") != "0" || resp.Header.Get("X-Should-Retry") != "true" || resp.Header.Get("X-Upstream-Said") != "kept" || resp.Header.Get("Request-Id") == "" {
					t.Errorf("headers changed: %v", resp.Header)
				}
				if n := len(proxiedCalls(fake)); n != tt.calls {
					t.Errorf("%d upstream calls, want %d", n, tt.calls)
				}
			})
		}
	}

	t.Run("x-should-retry false from the upstream reaches the client and stops a retry", func(t *testing.T) {
		fake.Reset()
		fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
			r := fakeapi.ErrorCodeReply(fakeapi.CodeRampLimit)
			r.Header = http.Header{"Retry-After": {"0"}, "X-Should-Retry": {"false"}}
			return r
		})
		resp, got := send(t, p.Addr, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 429 || resp.Header.Get("X-Should-Retry") != "false" || len(proxiedCalls(fake)) != 1 {
			t.Errorf("status %d, x-should-retry %q, %d calls: %s", resp.StatusCode, resp.Header.Get("X-Should-Retry"), len(proxiedCalls(fake)), got)
		}
	})

	t.Run("a pass-through route relays the code as it came", func(t *testing.T) {
		fake.Reset()
		fake.SetOptions(fakeapi.Options{December: fakeapi.December{KeyErrors: map[string]string{binKey: fakeapi.CodeOrganizationOnHold}}})
		defer fake.SetOptions(fakeapi.Options{})
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr+"/v1/models", nil)
		req.Header.Set("X-Api-Key", binKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		direct, _ := http.NewRequest(http.MethodGet, upURL+"/v1/models", nil)
		direct.Header = req.Header.Clone()
		dresp, err := http.DefaultClient.Do(direct)
		if err != nil {
			t.Fatal(err)
		}
		db, _ := io.ReadAll(dresp.Body)
		dresp.Body.Close()
		// The same answer but for its request id.
		strip := func(s string) string { return strings.Replace(s, gjson.Get(s, "request_id").Str, "", 1) }
		if resp.StatusCode != 400 || dresp.StatusCode != 400 || strip(string(b)) != strip(string(db)) ||
			gjson.GetBytes(b, "error.details.error_code").Str != fakeapi.CodeOrganizationOnHold {
			t.Errorf("relayed %d %s, the fake answers %d %s", resp.StatusCode, b, dresp.StatusCode, db)
		}
	})

	t.Run("the Health page names errors by type and code", func(t *testing.T) {
		admin, _ := consoleClient(t, p.Addr, consoleAdmin)
		_, page := consoleGet(t, admin, p.Addr, "/admin/ui/health")
		for _, row := range []string{
			"<td>402</td><td><code>billing_error</code></td><td><code>linked_organization_billing_unavailable</code></td><td class=\"num\">2</td>",
			"<td>429</td><td><code>rate_limit_error</code></td><td><code>contract_spend_limit_reached</code></td><td class=\"num\">2</td>",
			"<td>429</td><td><code>rate_limit_error</code></td><td><code>ramp_limit_exceeded</code></td><td class=\"num\">3</td>",
			"<td>400</td><td><code>invalid_request_error</code></td><td><code>organization_on_hold</code></td><td class=\"num\">1</td>",
		} {
			if !strings.Contains(page, row) {
				t.Errorf("lacks the row %s:\n%s", row, page)
			}
		}
	})
}

// billing_policy with anthropic-user-profile-id, output_config.task_budget, effort xhigh and
// speed reach the upstream as the client sent them, byte for byte, with the header.
func TestBinaryPassesDecemberFieldsThroughUntouched(t *testing.T) {
	pols, _, err := stack.Layout(t.TempDir(), map[string]string{
		"default.yaml": "tenant: default\nmemory:\n  mode: off\n",
		"acme.yaml": stack.TenantPolicy("acme", binKey, "context_management:\n  mode: enforce\n  clear_tool_uses:\n"+
			"    trigger: { type: input_tokens, value: 30000 }\nmemory:\n  mode: proxy\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	fake.SetOptions(fakeapi.Options{December: fakeapi.December{UserProfiles: map[string]string{"uprof_1": ""}}})
	p := startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", filepath.Join(t.TempDir(), "mem"))
	fields := `"billing_policy":{"type":"billing_policy","bill_to":"user_profile"},` +
		`"output_config":{"effort":"xhigh","task_budget":{"type":"tokens","total":400000,"remaining":250000}},` +
		`"speed":"fast"`
	for _, stream := range []bool{false, true} {
		body := `{"model":"claude-opus-5-5","max_tokens":100,` + fields + `,"stream":` + map[bool]string{false: "false", true: "true"}[stream] +
			`,"messages":[{"role":"user","content":"hi"}]}`
		fake.Reset()
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", binKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Anthropic-Beta", "task-budgets-2026-03-13,fast-mode-2026-02-01")
		req.Header.Set("Anthropic-User-Profile-Id", "uprof_1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, b)
		}
		got, ok := fake.LastRequest("/v1/messages")
		if !ok {
			t.Fatal("no upstream request")
		}
		if !strings.Contains(string(got.Body), fields) || got.Header.Get("Anthropic-User-Profile-Id") != "uprof_1" {
			t.Errorf("stream %v: upstream got %s with profile %q", stream, got.Body, got.Header.Get("Anthropic-User-Profile-Id"))
		}
		// The rewrite still did its job around them.
		if !gjson.GetBytes(got.Body, "context_management.edits").IsArray() {
			t.Errorf("stream %v: no edits written: %s", stream, got.Body)
		}
	}
}
