package fakeapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/tidwall/gjson"
)

// getModels sends GET path with a key, no beta unless header has one.
func getModels(t *testing.T, base, path string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	resp, out := do(t, base, call{method: http.MethodGet, path: path, header: header, noBetas: true})
	return resp.StatusCode, resp.Header, string(out)
}

func ids(page string) []string {
	var out []string
	for _, m := range gjson.Get(page, "data").Array() {
		out = append(out, m.Get("id").Str)
	}
	return out
}

// listed is the default table's ids in the order the API lists them, with
// the lifecycles given.
func listed(stages ...string) []string {
	var out []string
	for _, m := range newModelTable(nil).list {
		if slices.Contains(stages, m.Lifecycle) {
			out = append(out, m.ID)
		}
	}
	return out
}

func TestModelsListPages(t *testing.T) {
	_, base := newServer(t)
	unretired := listed(LifecycleActive, LifecycleDeprecated)
	all := listed(LifecycleActive, LifecycleDeprecated, LifecycleRetired)
	if len(unretired) < 6 || len(all) == len(unretired) {
		t.Fatalf("the default table lacks the cases the tests need: %v", all)
	}
	cases := []struct {
		name, query string
		want        []string
		hasMore     bool
	}{
		{"without a query it holds the active and deprecated models, newest first", "", unretired, false},
		{"limit cuts the first page and says there is more", "?limit=2", unretired[:2], true},
		{"after_id gives the page after a model", "?limit=2&after_id=" + unretired[1], unretired[2:4], true},
		{"after_id near the end gives the rest without more", "?limit=5&after_id=" + unretired[len(unretired)-3], unretired[len(unretired)-2:], false},
		{"before_id gives the page just before a model", "?limit=2&before_id=" + unretired[4], unretired[2:4], true},
		{"before_id near the start gives what is left without more", "?limit=5&before_id=" + unretired[2], unretired[:2], false},
		{"lifecycle=retired lists only retired models", "?lifecycle=retired", listed(LifecycleRetired), false},
		{"lifecycle[] (the Go SDK's spelling) filters the same", "?lifecycle[]=retired&lifecycle[]=deprecated", listed(LifecycleRetired, LifecycleDeprecated), false},
		{"all three stages list every model", "?lifecycle=active&lifecycle=deprecated&lifecycle=retired&limit=1000", all, false},
		{"a cursor on a model the filter leaves out still places the page", "?lifecycle=active&limit=1&after_id=claude-opus-4-5-20251101", listed(LifecycleActive)[slices.Index(listed(LifecycleActive), "claude-haiku-4-5-20251001"):][:1], false},
		{"a cursor naming no model gives an empty page", "?after_id=x", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _, out := getModels(t, base, "/v1/models"+c.query, nil)
			if st != 200 {
				t.Fatalf("status %d: %s", st, out)
			}
			if got := ids(out); !slices.Equal(got, c.want) {
				t.Errorf("ids %v, want %v", got, c.want)
			}
			page := gjson.Parse(out)
			if page.Get("has_more").Bool() != c.hasMore || page.Get("has_more").Type == gjson.Null {
				t.Errorf("has_more %s, want %v", page.Get("has_more").Raw, c.hasMore)
			}
			first, last := page.Get("first_id"), page.Get("last_id")
			if len(c.want) == 0 {
				if first.Type != gjson.Null || last.Type != gjson.Null {
					t.Errorf("first_id %s last_id %s, want null on an empty page", first.Raw, last.Raw)
				}
			} else if first.Str != c.want[0] || last.Str != c.want[len(c.want)-1] {
				t.Errorf("first_id %q last_id %q", first.Str, last.Str)
			}
		})
	}
}

func TestModelsListRefusesBadQueries(t *testing.T) {
	_, base := newServer(t)
	cases := []struct{ name, query, message string }{
		{"limit 0", "?limit=0", "greater than or equal to 1"},
		{"limit over 1000", "?limit=1001", "less than or equal to 1000"},
		{"a limit that is no integer", "?limit=ten", "valid integer"},
		{"an unknown lifecycle", "?lifecycle=sunset", "lifecycle"},
		{"more than 3 lifecycles", "?lifecycle=active&lifecycle=active&lifecycle=retired&lifecycle=deprecated", "at most 3"},
		{"both cursors", "?after_id=a&before_id=b", "together"},
	}
	for _, c := range cases {
		t.Run(c.name+" is a 400", func(t *testing.T) {
			st, _, out := getModels(t, base, "/v1/models"+c.query, nil)
			if st != 400 || gjson.Get(out, "error.type").Str != "invalid_request_error" || !strings.Contains(gjson.Get(out, "error.message").Str, c.message) {
				t.Fatalf("status %d: %s", st, out)
			}
		})
	}
}

// capabilityKeys is every key of capabilities per the December 2026 API reference's models-capabilities section.
var capabilityKeys = []string{"batch", "citations", "code_execution", "compaction", "context_management", "effort",
	"image_input", "pdf_input", "server_tools", "structured_outputs", "thinking"}

func TestAModelIsServedWithEveryField(t *testing.T) {
	_, base := newServer(t)
	cases := []struct {
		name, path string
		header     map[string]string
		check      func(t *testing.T, m gjson.Result)
	}{
		{"an alias resolves to its dated id", "/v1/models/claude-opus-4-5", nil, func(t *testing.T, m gjson.Result) {
			if m.Get("id").Str != "claude-opus-4-5-20251101" || m.Get("lifecycle").Str != LifecycleDeprecated ||
				m.Get("retires_at").Str != "2027-01-22T00:00:00Z" || m.Get("deprecated_at").Str == "" {
				t.Errorf("%s", m.Raw)
			}
		}},
		{"an active model has null dates and its limits at the top level", "/v1/models/claude-opus-4-8", nil, func(t *testing.T, m gjson.Result) {
			if m.Get("type").Str != "model" || m.Get("retires_at").Type != gjson.Null || m.Get("deprecated_at").Type != gjson.Null ||
				m.Get("max_input_tokens").Int() != 1_000_000 || m.Get("max_tokens").Int() != 128_000 || m.Get("line").Str != "opus" ||
				m.Get("capabilities.max_input_tokens").Exists() {
				t.Errorf("%s", m.Raw)
			}
		}},
		{"without a beta header the beta-only keys are left out", "/v1/models/claude-opus-4-8", nil, func(t *testing.T, m gjson.Result) {
			if m.Get("capabilities.compaction").Exists() || m.Get("allowed_fallback_models").Exists() {
				t.Errorf("%s", m.Raw)
			}
			for _, k := range capabilityKeys {
				if k != "compaction" && !m.Get("capabilities."+k).Exists() {
					t.Errorf("capabilities.%s missing", k)
				}
			}
		}},
		{"with any beta header every key is there", "/v1/models/claude-opus-4-8", map[string]string{"Anthropic-Beta": "files-api-2025-04-14"}, func(t *testing.T, m gjson.Result) {
			for _, k := range capabilityKeys {
				if !m.Get("capabilities." + k).Exists() {
					t.Errorf("capabilities.%s missing", k)
				}
			}
			if !m.Get("allowed_fallback_models").IsArray() || !m.Get("capabilities.compaction.summarize.supported").Bool() {
				t.Errorf("%s", m.Raw)
			}
		}},
		{"a null strategy entry is served as null", "/v1/models/claude-haiku-4-5", nil, func(t *testing.T, m gjson.Result) {
			cm := m.Get("capabilities.context_management")
			if !cm.Get("supported").Bool() || cm.Get("compact_20260112").Type != gjson.Null || !cm.Get("compact_20260112").Exists() {
				t.Errorf("%s", cm.Raw)
			}
		}},
		{"a retired model stays readable", "/v1/models/claude-opus-4-1", nil, func(t *testing.T, m gjson.Result) {
			if m.Get("lifecycle").Str != LifecycleRetired || m.Get("retires_at").Str == "" {
				t.Errorf("%s", m.Raw)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _, out := getModels(t, base, c.path, c.header)
			if st != 200 {
				t.Fatalf("status %d: %s", st, out)
			}
			c.check(t, gjson.Parse(out))
		})
	}
	t.Run("an unknown model is a 404 not_found_error", func(t *testing.T) {
		st, _, out := getModels(t, base, "/v1/models/claude-nope-9", nil)
		if st != 404 || gjson.Get(out, "error.type").Str != "not_found_error" {
			t.Fatalf("status %d: %s", st, out)
		}
	})
}

func TestTheModelTableCanBeReplaced(t *testing.T) {
	mine := []Model{
		{ID: "m-new", DisplayName: "New", CreatedAt: "2026-12-01T00:00:00Z", Lifecycle: LifecycleActive,
			Capabilities: &Capabilities{ContextManagement: ContextManagementCapability{Supported: false}}},
		{ID: "m-raw", Lifecycle: LifecycleActive, CreatedAt: "2026-01-01T00:00:00Z", Raw: []byte(`{"type":"model","id":"m-raw","capabilities":{}}`)},
		{ID: "m-old", DisplayName: "Old", CreatedAt: "2025-01-01T00:00:00Z", Lifecycle: LifecycleDeprecated, RetiresAt: "2025-06-01T00:00:00Z"},
	}
	t.Run("with WithModels", func(t *testing.T) {
		_, base := newServer(t, WithModels(mine...))
		_, _, out := getModels(t, base, "/v1/models", nil)
		if got := ids(out); !slices.Equal(got, []string{"m-new", "m-raw", "m-old"}) {
			t.Fatalf("ids %v", got)
		}
		_, _, out = getModels(t, base, "/v1/models/m-raw", nil)
		if out != `{"type":"model","id":"m-raw","capabilities":{}}` {
			t.Errorf("raw model served as %s", out)
		}
		_, _, out = getModels(t, base, "/v1/models/m-old", nil)
		if gjson.Get(out, "capabilities").Type != gjson.Null || gjson.Get(out, "max_tokens").Type != gjson.Null {
			t.Errorf("nil capabilities and limits must be null: %s", out)
		}
	})
	t.Run("with POST /_fake/options, and null brings the default back", func(t *testing.T) {
		api, base := newServer(t)
		opts := string(mustJSON(map[string]any{"models": mine[:1]}))
		if resp, out := do(t, base, call{path: "/_fake/options", body: opts}); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		if _, _, out := getModels(t, base, "/v1/models", nil); !slices.Equal(ids(out), []string{"m-new"}) {
			t.Fatalf("after replacing: %s", out)
		}
		// The table drives validation too: m-new takes no edit strategy.
		resp, out := do(t, base, call{body: body(`{"model":"m-new","context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`)})
		if resp.StatusCode != 400 || !strings.Contains(string(out), "not supported by model m-new") {
			t.Errorf("%d %s", resp.StatusCode, out)
		}
		do(t, base, call{path: "/_fake/options", body: `{"models":null}`})
		if _, _, out := getModels(t, base, "/v1/models", nil); len(ids(out)) < 6 {
			t.Fatalf("after null: %s", out)
		}
		api.SetModels([]Model{})
		if _, _, out := getModels(t, base, "/v1/models", nil); len(ids(out)) != 0 || gjson.Get(out, "has_more").Bool() {
			t.Fatalf("an empty table: %s", out)
		}
	})
	t.Run("ModelBetaFieldsAlways serves the beta-only keys without a beta", func(t *testing.T) {
		_, base := newServer(t, WithOptions(Options{December: December{ModelBetaFieldsAlways: true}}))
		_, _, out := getModels(t, base, "/v1/models/claude-opus-4-8", nil)
		if !gjson.Get(out, "capabilities.compaction").Exists() || !gjson.Get(out, "allowed_fallback_models").Exists() {
			t.Errorf("%s", out)
		}
	})
}

func TestModelsRoutesAnswerTheKeysErrorCodes(t *testing.T) {
	_, base := newServer(t, WithOptions(Options{December: December{KeyErrors: map[string]string{
		"sk-test": CodeOrganizationOnHold, "sk-broke": CodeContractSpendLimit}}}))
	st, _, out := getModels(t, base, "/v1/models", nil)
	if st != 400 || gjson.Get(out, "error.details.error_code").Str != CodeOrganizationOnHold {
		t.Errorf("on hold: %d %s", st, out)
	}
	st, _, out = getModels(t, base, "/v1/models/claude-opus-4-8", map[string]string{"X-Api-Key": "sk-broke"})
	if st != 200 {
		t.Errorf("a spend limit does not close the models routes: %d %s", st, out)
	}
}

// The Go SDK reads the fake's pages and models as the real API's.
func TestTheGoSDKPagesThroughTheModels(t *testing.T) {
	_, base := newServer(t)
	client := sdkClient(base)
	ctx := context.Background()
	pager := client.Beta.Models.ListAutoPaging(ctx, anthropic.BetaModelListParams{Limit: anthropic.Int(3),
		Lifecycle: []string{"active", "deprecated", "retired"}})
	var got []string
	for pager.Next() {
		got = append(got, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	if want := listed(LifecycleActive, LifecycleDeprecated, LifecycleRetired); !slices.Equal(got, want) {
		t.Fatalf("paged %v, want %v", got, want)
	}
	m, err := client.Beta.Models.Get(ctx, "claude-haiku-5-5", anthropic.BetaModelGetParams{
		Betas: []anthropic.AnthropicBeta{anthropic.AnthropicBetaContextManagement2025_06_27}})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Capabilities
	if c.ContextManagement.Compact20260112.Supported || !c.ContextManagement.ClearToolUses20250919.Supported ||
		c.Thinking.Types.BetweenTools.Supported || !c.Thinking.Types.Adaptive.Supported || c.Compaction.Supported ||
		m.MaxInputTokens != 400_000 || string(m.Lifecycle) != LifecycleActive {
		t.Errorf("%+v", m)
	}
}
