package fakeapi

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// decCase is one request and what the fake must answer.
type decCase struct {
	name    string
	body    string
	path    string
	header  map[string]string
	status  int
	message string // substring of error.message ("" for accepted)
	code    string // error.details.error_code
}

func runDecCases(t *testing.T, base string, cases []decCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, out := do(t, base, call{path: c.path, body: c.body, header: c.header})
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, out)
			}
			if msg := gjson.GetBytes(out, "error.message").Str; !strings.Contains(msg, c.message) {
				t.Errorf("message %q, want it to contain %q", msg, c.message)
			}
			if got := gjson.GetBytes(out, "error.details.error_code").Str; got != c.code {
				t.Errorf("error_code %q, want %q", got, c.code)
			}
		})
	}
}

func withBeta(b string) map[string]string {
	return map[string]string{"Anthropic-Beta": defaultBetas + "," + b}
}

func TestThinkingTypesAndControls(t *testing.T) {
	_, base := newServer(t)
	between := `"thinking":{"type":"between_tools"}`
	runDecCases(t, base, []decCase{
		{name: "between_tools is accepted by a model that lists it", body: body(`{"model":"claude-opus-4-8",` + between + `}`), status: 200},
		{name: "between_tools is refused by a model that does not", body: body(`{"model":"claude-opus-4-7",` + between + `}`), status: 400, message: "'between_tools' is not supported by model claude-opus-4-7"},
		{name: "between_tools is accepted by a model the table does not know", body: body(`{` + between + `}`), status: 200},
		{name: "between_tools takes no budget", body: body(`{"thinking":{"type":"between_tools","budget_tokens":2048}}`), status: 400, message: "thinking.between_tools.budget_tokens: Extra inputs"},
		{name: "between_tools takes no block_binding", body: body(`{"thinking":{"type":"between_tools","block_binding":{}}}`), status: 400, message: "thinking.between_tools.block_binding: Extra inputs"},
		{name: "disabled takes no block_binding", body: body(`{"thinking":{"type":"disabled","block_binding":{}}}`), status: 400, message: "thinking.disabled.block_binding"},
		{name: "adaptive is refused by a model without it", body: body(`{"model":"claude-opus-4-5","thinking":{"type":"adaptive"}}`), status: 400, message: "'adaptive' is not supported"},
		{name: "an unknown thinking type names between_tools among the choices", body: body(`{"thinking":{"type":"sometimes"}}`), status: 400, message: "'between_tools'"},
		{name: "block_binding drop_block is accepted", body: body(`{"thinking":{"type":"enabled","budget_tokens":1024,"block_binding":{"prefix_mismatch_behavior":"drop_block"}}}`), status: 200},
		{name: "block_binding error is accepted on adaptive", body: body(`{"thinking":{"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"error"}}}`), status: 200},
		{name: "an empty block_binding means the defaults", body: body(`{"thinking":{"type":"adaptive","block_binding":{}}}`), status: 200},
		{name: "a null block_binding means the defaults", body: body(`{"thinking":{"type":"adaptive","block_binding":null,"display":null}}`), status: 200},
		{name: "an unknown prefix_mismatch_behavior is refused", body: body(`{"thinking":{"type":"adaptive","block_binding":{"prefix_mismatch_behavior":"ignore"}}}`), status: 400, message: "'error' or 'drop_block'"},
		{name: "an unknown block_binding field is refused", body: body(`{"thinking":{"type":"adaptive","block_binding":{"model_mismatch_behavior":"error"}}}`), status: 400, message: "block_binding.model_mismatch_behavior: Extra inputs"},
		{name: "a block_binding that is no object is refused", body: body(`{"thinking":{"type":"adaptive","block_binding":"drop_block"}}`), status: 400, message: "block_binding: Input should be an object"},
		{name: "display updates is accepted", body: body(`{"thinking":{"type":"adaptive","display":"updates"}}`), status: 200},
		{name: "an unknown display is refused", body: body(`{"thinking":{"type":"adaptive","display":"full"}}`), status: 400, message: "display"},
		{name: "clear_thinking is accepted with between_tools", body: body(`{` + between + `,"context_management":{"edits":[{"type":"clear_thinking_20251015"}]}}`), status: 200},
	})
	t.Run("BetweenToolsRefusesClearThinking refuses clear_thinking with between_tools", func(t *testing.T) {
		_, base := newServer(t, WithOptions(Options{December: December{BetweenToolsRefusesClearThinking: true}}))
		runDecCases(t, base, []decCase{{name: "refused", body: body(`{` + between + `,"context_management":{"edits":[{"type":"clear_thinking_20251015"}]}}`), status: 400, message: "requires extended thinking"}})
	})
}

func TestModelFactsAreEnforced(t *testing.T) {
	_, base := newServer(t)
	runDecCases(t, base, []decCase{
		{name: "a retired model is refused with 404", body: body(`{"model":"claude-mythos-preview"}`), status: 404, message: "retired"},
		{name: "a retired model's alias is refused too", body: body(`{"model":"claude-opus-4-1"}`), status: 404, message: "claude-opus-4-1-20250805"},
		{name: "a deprecated model is still served", body: body(`{"model":"claude-opus-4-5"}`), status: 200},
		{name: "max_tokens at the model's limit is accepted", body: body(`{"model":"claude-sonnet-5","max_tokens":64000}`), status: 200},
		{name: "max_tokens over the model's limit is refused", body: body(`{"model":"claude-sonnet-5","max_tokens":64001}`), status: 400, message: "64001 > 64000"},
		{name: "an edit strategy the model lacks is refused", body: body(`{"model":"claude-haiku-5-5","context_management":{"edits":[{"type":"compact_20260112"}]}}`), status: 400, message: "compact_20260112 is not supported by model claude-haiku-5-5"},
		{name: "an edit strategy the model has is accepted", body: body(`{"model":"claude-haiku-5-5","context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`), status: 200},
		{name: "a null strategy entry (unknown) is accepted", body: body(`{"model":"claude-haiku-4-5","context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`), status: 200},
		{name: "on-demand compaction on a model without it is refused", body: body(`{"model":"claude-haiku-5-5","compaction":{"type":"summarize"}}`), status: 400, message: "'summarize' is not supported"},
		{name: "count_tokens refuses a retired model too", path: "/v1/messages/count_tokens", body: body(`{"model":"claude-mythos-preview"}`), status: 404},
	})
}

func TestEffortTaskBudgetAndSpeed(t *testing.T) {
	_, base := newServer(t)
	tb := func(v string) string { return body(`{"output_config":{"task_budget":` + v + `}}`) }
	runDecCases(t, base, []decCase{
		{name: "effort xhigh on a model with it is accepted", body: body(`{"model":"claude-opus-4-8","output_config":{"effort":"xhigh"}}`), status: 200},
		{name: "effort xhigh on a model without it is refused", body: body(`{"model":"claude-opus-4-7","output_config":{"effort":"xhigh"}}`), status: 400, message: "effort 'xhigh' is not supported by model claude-opus-4-7"},
		{name: "effort max on a model without it is refused", body: body(`{"model":"claude-haiku-5-5","output_config":{"effort":"max"}}`), status: 400, message: "effort 'max'"},
		{name: "effort on a model without effort is refused", body: body(`{"model":"claude-haiku-4-5","output_config":{"effort":"low"}}`), status: 400, message: "effort 'low'"},
		{name: "effort xhigh on an unknown model is accepted", body: body(`{"output_config":{"effort":"xhigh"}}`), status: 200},
		{name: "an unknown effort level is refused", body: body(`{"output_config":{"effort":"extreme"}}`), status: 400, message: "'low', 'medium', 'high', 'xhigh' or 'max'"},
		{name: "a null effort and other output_config fields pass", body: body(`{"output_config":{"effort":null,"format":{"type":"json_schema","schema":{"type":"object"}}}}`), status: 200},
		{name: "an output_config that is no object is refused", body: body(`{"output_config":"high"}`), status: 400, message: "output_config: Input should be an object"},
		{name: "a task budget without its beta is refused", body: tb(`{"type":"tokens","total":50000}`), status: 400, message: BetaTaskBudgets},
		{name: "a task budget with its beta is accepted", body: tb(`{"type":"tokens","total":50000,"remaining":1200}`), header: withBeta(BetaTaskBudgets), status: 200},
		{name: "a null remaining is the total", body: tb(`{"type":"tokens","total":50000,"remaining":null}`), header: withBeta(BetaTaskBudgets), status: 200},
		{name: "a task budget of another type is refused", body: tb(`{"type":"seconds","total":50}`), header: withBeta(BetaTaskBudgets), status: 400, message: "task_budget.type"},
		{name: "a task budget without total is refused", body: tb(`{"type":"tokens"}`), header: withBeta(BetaTaskBudgets), status: 400, message: "task_budget.total: Field required"},
		{name: "a task budget of 0 is refused", body: tb(`{"type":"tokens","total":0}`), header: withBeta(BetaTaskBudgets), status: 400, message: "greater than or equal to 1"},
		{name: "more remaining than total is refused", body: tb(`{"type":"tokens","total":10,"remaining":11}`), header: withBeta(BetaTaskBudgets), status: 400, message: "must not exceed total"},
		{name: "an unknown task budget field is refused", body: tb(`{"type":"tokens","total":10,"spent":1}`), header: withBeta(BetaTaskBudgets), status: 400, message: "spent: Extra inputs"},
		{name: "speed standard is accepted anywhere", body: body(`{"model":"claude-sonnet-5","speed":"standard"}`), status: 200},
		{name: "speed fast on a model with fast mode is accepted", body: body(`{"model":"claude-opus-4-8","speed":"fast"}`), status: 200},
		{name: "speed fast on a model whose fast mode is a beta needs it", body: body(`{"model":"claude-opus-5-5","speed":"fast"}`), status: 400, message: BetaFastMode},
		{name: "speed fast with the fast-mode beta is accepted", body: body(`{"model":"claude-opus-5-5","speed":"fast"}`), header: withBeta(BetaFastMode), status: 200},
		{name: "speed fast on a model without fast mode is refused", body: body(`{"model":"claude-sonnet-5","speed":"fast"}`), status: 400, message: "not available for model claude-sonnet-5"},
		{name: "an unknown speed is refused", body: body(`{"speed":"turbo"}`), status: 400, message: "'standard' or 'fast'"},
	})
}

func TestBillingPolicyAndUserProfiles(t *testing.T) {
	bill := func(to string) string {
		return body(`{"billing_policy":{"type":"billing_policy","bill_to":"` + to + `"}}`)
	}
	profile := func(id string) map[string]string { return map[string]string{HeaderUserProfile: id} }
	t.Run("every profile is billable without a profile table", func(t *testing.T) {
		_, base := newServer(t)
		runDecCases(t, base, []decCase{
			{name: "bill_to self is accepted", body: bill("self"), status: 200},
			{name: "a policy without bill_to bills self", body: body(`{"billing_policy":{"type":"billing_policy"}}`), status: 200},
			{name: "bill_to user_profile without the header is user_profile_required", body: bill("user_profile"), status: 400, code: CodeProfileRequired},
			{name: "bill_to user_profile with the header is accepted", body: bill("user_profile"), header: profile("uprof_1"), status: 200},
			{name: "another policy type is refused", body: body(`{"billing_policy":{"type":"policy","bill_to":"self"}}`), status: 400, message: "billing_policy.type"},
			{name: "another bill_to is refused", body: bill("partner"), status: 400, message: "'self' or 'user_profile'"},
			{name: "an unknown policy field is refused", body: body(`{"billing_policy":{"type":"billing_policy","cap":1}}`), status: 400, message: "billing_policy.cap: Extra inputs"},
		})
	})
	t.Run("a profile table decides who exists and who can be billed", func(t *testing.T) {
		_, base := newServer(t, WithOptions(Options{December: December{UserProfiles: map[string]string{
			"uprof_ok": "", "uprof_spent": CodeLinkedOrgSpendLimit, "uprof_down": CodeLinkedOrgBillingUnavailable,
			"uprof_no": CodeProfileNotBillable, "uprof_unauth": CodeProfileNotAuthorized}}}))
		runDecCases(t, base, []decCase{
			{name: "a billable profile is billed", body: bill("user_profile"), header: profile("uprof_ok"), status: 200},
			{name: "an unknown profile is user_profile_not_found, whatever the policy", body: body(""), header: profile("uprof_x"), status: 400, code: CodeProfileNotFound},
			{name: "a linked organization at its limit is a 402", body: bill("user_profile"), header: profile("uprof_spent"), status: 402, code: CodeLinkedOrgSpendLimit},
			{name: "a linked organization that cannot be billed is a 402", body: bill("user_profile"), header: profile("uprof_down"), status: 402, code: CodeLinkedOrgBillingUnavailable},
			{name: "a profile that cannot be billed is a 403", body: bill("user_profile"), header: profile("uprof_no"), status: 403, code: CodeProfileNotBillable},
			{name: "a profile that did not authorise billing is a 403", body: bill("user_profile"), header: profile("uprof_unauth"), status: 403, code: CodeProfileNotAuthorized},
			{name: "billing self for a blocked profile is fine", body: bill("self"), header: profile("uprof_spent"), status: 200},
			{name: "count_tokens bills nobody", path: "/v1/messages/count_tokens", body: bill("user_profile"), header: profile("uprof_spent"), status: 200},
		})
	})
	t.Run("BillingPolicyNeedsBeta refuses the policy without its beta", func(t *testing.T) {
		_, base := newServer(t, WithOptions(Options{December: December{BillingPolicyNeedsBeta: true}}))
		runDecCases(t, base, []decCase{
			{name: "without", body: bill("self"), status: 400, message: BetaUserProfilesBilling},
			{name: "with", body: bill("self"), header: withBeta(BetaUserProfilesBilling), status: 200},
		})
	})
}

func TestErrorCodesAreAnsweredWithTheirStatusTypeAndHeaders(t *testing.T) {
	for _, noRetry := range []bool{false, true} {
		_, base := newServer(t, WithOptions(Options{December: December{SpendLimitsNoRetry: noRetry}}))
		for _, code := range ErrorCodes() {
			name := code
			if noRetry {
				name += " with SpendLimitsNoRetry"
			}
			t.Run(name, func(t *testing.T) {
				info := errorCodes[code]
				for _, how := range []string{"ErrorCodeReply", "JSON error_code"} {
					var script string
					if how == "ErrorCodeReply" {
						script = string(mustJSON([]Reply{ErrorCodeReply(code)}))
					} else {
						script = `[{"error_code":"` + code + `"}]`
					}
					if resp, out := do(t, base, call{path: "/_fake/script", body: script}); resp.StatusCode != 200 {
						t.Fatalf("%s: script %d %s", how, resp.StatusCode, out)
					}
					resp, out := do(t, base, call{body: body("")})
					e := gjson.GetBytes(out, "error")
					if resp.StatusCode != info.status || e.Get("type").Str != info.typ || e.Get("details.error_code").Str != code ||
						e.Get("message").Str == "" || gjson.GetBytes(out, "request_id").Str == "" {
						t.Errorf("%s: %d %s", how, resp.StatusCode, out)
					}
					if want := info.header["Retry-After"]; resp.Header.Get("Retry-After") != want {
						t.Errorf("%s: retry-after %q, want %q", how, resp.Header.Get("Retry-After"), want)
					}
					spend := code == CodeContractSpendLimit || code == CodeEnforcedSpendLimit || code == CodeLinkedOrgSpendLimit
					if got := resp.Header.Get("X-Should-Retry"); (got == "false") != (spend && noRetry) {
						t.Errorf("%s: x-should-retry %q", how, got)
					}
				}
			})
		}
	}
	t.Run("the spec's codes are all known with the spec's statuses", func(t *testing.T) {
		want := map[string]int{CodeContractSpendLimit: 429, CodeEnforcedSpendLimit: 429, CodeRampLimit: 429,
			CodeLinkedOrgSpendLimit: 402, CodeLinkedOrgBillingUnavailable: 402, CodeProfileNotAuthorized: 403,
			CodeProfileNotBillable: 403, CodeProfileRequired: 400, CodeProfileNotFound: 400, CodeTooLargeAfterDecoding: 413,
			CodeEncodingInvalid: 400, CodeEncodingUnsupported: 400, CodeURLFetchDisabled: 400, CodeImageTooLarge: 400,
			CodeStorageNotReady: 503, CodeKeyCreatorNotMember: 400, CodeOrganizationOnHold: 400}
		for code, st := range want {
			if errorCodes[code].status != st {
				t.Errorf("%s: status %d, want %d", code, errorCodes[code].status, st)
			}
		}
		if len(ErrorCodes()) != len(want) {
			t.Errorf("ErrorCodes() = %v", ErrorCodes())
		}
	})
}

func TestKeyErrorsAnswerAKeysRequests(t *testing.T) {
	_, base := newServer(t, WithOptions(Options{December: December{KeyErrors: map[string]string{
		"sk-ramp": CodeRampLimit, "sk-hold": CodeOrganizationOnHold}}}))
	key := func(k string) map[string]string { return map[string]string{"X-Api-Key": k} }
	runDecCases(t, base, []decCase{
		{name: "a ramp-limited key gets 429 ramp_limit_exceeded", body: body(""), header: key("sk-ramp"), status: 429, code: CodeRampLimit},
		{name: "its count_tokens still answers", path: "/v1/messages/count_tokens", body: body(""), header: key("sk-ramp"), status: 200},
		{name: "an organization on hold gets 400 on count_tokens too", path: "/v1/messages/count_tokens", body: body(""), header: key("sk-hold"), status: 400, code: CodeOrganizationOnHold},
		{name: "other keys are served", body: body(""), status: 200},
		{name: "a bad request is still a 400 first", body: body(`{"max_tokens":0}`), header: key("sk-ramp"), status: 400, message: "max_tokens"},
	})
	resp, _ := do(t, base, call{body: body(""), header: key("sk-ramp")})
	if resp.Header.Get("Retry-After") != "30" {
		t.Errorf("retry-after %q", resp.Header.Get("Retry-After"))
	}
}

func TestAnUndecodableBodyGetsTheEncodingCodes(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(bytes.Repeat([]byte("a"), 2<<20))
	_ = zw.Close()
	_, base := newServer(t, WithOptions(Options{MaxBodyBytes: 1 << 20}))
	runDecCases(t, base, []decCase{
		{name: "a body that is not gzip under gzip", body: body(""), header: map[string]string{"Content-Encoding": "gzip"}, status: 400, code: CodeEncodingInvalid},
		{name: "an encoding the API does not take", body: body(""), header: map[string]string{"Content-Encoding": "compress"}, status: 400, code: CodeEncodingUnsupported},
		{name: "a body over the limit once decoded", body: gz.String(), header: map[string]string{"Content-Encoding": "gzip"}, status: 413, code: CodeTooLargeAfterDecoding},
	})
}
