package fakeapi

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/tidwall/gjson"
)

// Beta values of the December 2026 API the fake checks for.
const (
	BetaThinkingBinding     = "thinking-binding-controls-2026-08-01"
	BetaTaskBudgets         = "task-budgets-2026-03-13"
	BetaFastMode            = "fast-mode-2026-02-01"
	BetaUserProfilesBilling = "user-profiles-billing-2026-10-01"
)

// HeaderUserProfile names the user profile a request is for (and, with
// billing_policy.bill_to "user_profile", the one it bills).
const HeaderUserProfile = "Anthropic-User-Profile-Id"

// End-user sources for December.EndUser.
const (
	EndUserProfile  = "user_profile"     // the anthropic-user-profile-id header (the default)
	EndUserMetadata = "metadata_user_id" // metadata.user_id
	EndUserBoth     = "both"             // the pair
)

// December holds the options of the API as of December 2026 (the December 2026 API reference): the
// model table, thinking block binding, billing and the switches for what
// the SDKs leave unverified. It is embedded in Options, so its fields sit at
// the top level of /_fake/options.
type December struct {
	// Models replaces DefaultModels (nil: the default table; empty: none).
	Models []Model `json:"models"`
	// ModelBetaFieldsAlways serves capabilities.compaction and
	// allowed_fallback_models without an anthropic-beta header too
	// (unverified which the API does, the December 2026 API reference's unverified list).
	ModelBetaFieldsAlways bool `json:"model_beta_fields_always"`
	// KeyErrors answers every request made with a credential by an error
	// code (e.g. {"sk-x":"contract_spend_limit_reached"}): POST /v1/messages
	// with any code, count_tokens and GET /v1/models* with the codes that
	// concern the key or the organization itself (organization_on_hold,
	// claude_code_key_creator_not_member).
	KeyErrors map[string]string `json:"key_errors"`
	// SpendLimitsNoRetry sends x-should-retry: false with the spend limit
	// codes (unverified whether the API does, the December 2026 API reference's new-error-codes section).
	SpendLimitsNoRetry bool `json:"spend_limits_no_retry"`
	// UserProfiles, when not nil, is every user profile the organization
	// has, each with "" (billable) or the error code billing it answers
	// (user_profile_not_billable, user_profile_billing_not_authorized,
	// linked_organization_spend_limit_reached,
	// linked_organization_billing_unavailable). A profile not listed is
	// user_profile_not_found. nil: every profile exists and is billable.
	UserProfiles map[string]string `json:"user_profiles"`
	// BillingPolicyNeedsBeta refuses billing_policy without the
	// user-profiles-billing-2026-10-01 beta (unverified, the December 2026 API reference's billing section).
	BillingPolicyNeedsBeta bool `json:"billing_policy_needs_beta"`
	// Organizations maps credentials to organizations for thinking block
	// binding; a credential not listed is an organization of its own.
	Organizations map[string]string `json:"organizations"`
	// EndUser is the request field binding reads as the end user: "" or
	// "user_profile" (the header), "metadata_user_id", or "both" (which
	// field it is is unverified, the December 2026 API reference's thinking-binding section).
	EndUser string `json:"end_user"`
	// PrefixBindingUnenforced lists models ("*": all) that do not enforce
	// the prefix check: a block failing it is kept and reported as
	// thinking_mismatch_allowed (which models enforce it by default is
	// unverified, the December 2026 API reference's thinking-binding section).
	PrefixBindingUnenforced []string `json:"prefix_binding_unenforced"`
	// BindingMismatchRefuses makes the model, organization and end-user
	// checks refuse the request like the prefix check under "error" rather
	// than drop the block (unverified whether they can, the December 2026 API reference's thinking-binding section).
	BindingMismatchRefuses bool `json:"binding_mismatch_refuses"`
	// BetweenToolsRefusesClearThinking refuses clear_thinking_20251015 with
	// thinking type between_tools, as with thinking off (unverified,
	// the December 2026 API reference's between_tools section); by default the fake accepts it.
	BetweenToolsRefusesClearThinking bool `json:"between_tools_refuses_clear_thinking"`
}

// december is what parseRequest learns of the December API's fields.
type december struct {
	table          *modelTable
	info           *Model // the requested model's table entry; nil when unknown
	thinkingType   string // thinking.type as sent ("" without thinking)
	dropOnPrefix   bool   // thinking.block_binding.prefix_mismatch_behavior "drop_block"
	btRefusesClear bool   // Options.BetweenToolsRefusesClearThinking
	// sent is the conversation as sent when binding dropped blocks from
	// messages (which is then the prompt the model sees); nil otherwise.
	sent       []json.RawMessage
	transforms []InputTransformation
	// reportTransforms: the reply carries input_transformations (the
	// binding beta, and a model with extended thinking).
	reportTransforms bool
	bindAs           binding // model, organization and end user of this request
}

// conversation is the full conversation as the client sent it.
func (p *parsed) conversation() []json.RawMessage {
	if p.sent != nil {
		return p.sent
	}
	return p.messages
}

// checkThinkingControls checks what the December API added to the thinking
// object: between_tools (type only), block_binding (enabled and adaptive
// only) and display.
func (p *parsed) checkThinkingControls(t gjson.Result, typ string) *reqError {
	p.thinkingType = typ
	where := "thinking." + typ
	switch typ {
	case "between_tools":
		return onlyFields(t, where, "type")
	case "disabled":
		if t.Get("block_binding").Exists() {
			return badRequest("%s.block_binding: Extra inputs are not permitted", where)
		}
		return nil
	}
	if d := t.Get("display"); d.Exists() && d.Type != gjson.Null &&
		(d.Type != gjson.String || !slices.Contains([]string{"summarized", "omitted", "updates"}, d.Str)) {
		return badRequest("%s.display: Input should be 'summarized', 'omitted' or 'updates'", where)
	}
	bb := t.Get("block_binding")
	if !bb.Exists() || bb.Type == gjson.Null {
		return nil
	}
	if !bb.IsObject() {
		return badRequest("%s.block_binding: Input should be an object", where)
	}
	if e := onlyFields(bb, where+".block_binding", "prefix_mismatch_behavior"); e != nil {
		return e
	}
	switch b := bb.Get("prefix_mismatch_behavior"); {
	case !b.Exists() || b.Type == gjson.Null || (b.Type == gjson.String && b.Str == "error"):
	case b.Type == gjson.String && b.Str == "drop_block":
		p.dropOnPrefix = true
	default:
		return badRequest("%s.block_binding.prefix_mismatch_behavior: Input should be 'error' or 'drop_block'", where)
	}
	return nil
}

// checkDecember applies the model table and the December request fields:
// the model's lifecycle, max_tokens and capabilities (thinking types,
// effort levels, edit strategies, on-demand compaction), output_config
// (effort, task_budget), speed, billing_policy and the user profile.
func (p *parsed) checkDecember(f *topLevel, h http.Header, opts *Options, countTokens bool) *reqError {
	if e := checkModel(p.info, p.maxTokens); e != nil {
		return e
	}
	c := caps(p.info)
	if c != nil && p.thinkingType != "" {
		ty := c.Thinking.Types
		ok := map[string]bool{"enabled": ty.Enabled.Supported, "adaptive": ty.Adaptive.Supported,
			"disabled": ty.Disabled.Supported, "between_tools": ty.BetweenTools.Supported}[p.thinkingType]
		if !ok {
			return notSupported("thinking.type", "'"+p.thinkingType+"'", p.info.ID)
		}
	}
	for i, ed := range p.edits {
		if e := checkEditSupport(c, ed.typ, "context_management.edits."+itoa(int64(i)), p.model); e != nil {
			return e
		}
	}
	if p.onDemand != nil && c != nil && c.Compaction != nil && !(c.Compaction.Supported && c.Compaction.Summarize.Supported) {
		return notSupported("compaction.type", "'summarize'", p.model)
	}
	if e := p.checkOutputConfig(result(f.outputConfig), c); e != nil {
		return e
	}
	if e := p.checkSpeed(result(f.speed)); e != nil {
		return e
	}
	return p.checkBilling(result(f.billingPolicy), h, opts, countTokens)
}

var effortLevels = []string{"low", "medium", "high", "xhigh", "max"}

func (p *parsed) checkOutputConfig(oc gjson.Result, c *Capabilities) *reqError {
	if !oc.Exists() || oc.Type == gjson.Null {
		return nil
	}
	if !oc.IsObject() {
		return badRequest("output_config: Input should be an object")
	}
	if ef := oc.Get("effort"); ef.Exists() && ef.Type != gjson.Null {
		if ef.Type != gjson.String || !slices.Contains(effortLevels, ef.Str) {
			return badRequest("output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'")
		}
		if c != nil {
			e := c.Effort
			level := map[string]*Support{"low": &e.Low, "medium": &e.Medium, "high": &e.High, "max": &e.Max, "xhigh": e.XHigh}[ef.Str]
			if !e.Supported || (level != nil && !level.Supported) {
				return notSupported("output_config.effort", "effort '"+ef.Str+"'", p.model)
			}
		}
	}
	tb := oc.Get("task_budget")
	if !tb.Exists() || tb.Type == gjson.Null {
		return nil
	}
	if !slices.Contains(p.betas, BetaTaskBudgets) {
		return badRequest("output_config.task_budget: requires the anthropic-beta header %q", BetaTaskBudgets)
	}
	if !tb.IsObject() {
		return badRequest("output_config.task_budget: Input should be an object")
	}
	if e := onlyFields(tb, "output_config.task_budget", "type", "total", "remaining"); e != nil {
		return e
	}
	if t := tb.Get("type"); t.Type != gjson.String || t.Str != "tokens" {
		return badRequest("output_config.task_budget.type: Input should be 'tokens'")
	}
	total, ok := isInt(tb.Get("total"))
	switch {
	case !tb.Get("total").Exists():
		return badRequest("output_config.task_budget.total: Field required")
	case !ok:
		return badRequest("output_config.task_budget.total: Input should be a valid integer")
	case total < 1:
		return badRequest("output_config.task_budget.total: Input should be greater than or equal to 1")
	}
	if r := tb.Get("remaining"); r.Exists() && r.Type != gjson.Null {
		// Unverified whether the API refuses a remaining over total; the fake
		// does, as a budget cannot have more left than it had.
		n, ok := isInt(r)
		switch {
		case !ok:
			return badRequest("output_config.task_budget.remaining: Input should be a valid integer")
		case n < 0:
			return badRequest("output_config.task_budget.remaining: Input should be greater than or equal to 0")
		case n > total:
			return badRequest("output_config.task_budget.remaining: must not exceed total (%d)", total)
		}
	}
	return nil
}

func (p *parsed) checkSpeed(s gjson.Result) *reqError {
	if !s.Exists() || s.Type == gjson.Null || (s.Type == gjson.String && s.Str == "standard") {
		return nil
	}
	if s.Type != gjson.String || s.Str != "fast" {
		return badRequest("speed: Input should be 'standard' or 'fast'")
	}
	if p.info == nil {
		return nil
	}
	switch p.info.FastMode {
	case "ga":
	case "beta":
		if !slices.Contains(p.betas, BetaFastMode) {
			return badRequest("speed: 'fast' with model %s requires the anthropic-beta header %q", p.info.ID, BetaFastMode)
		}
	default:
		return badRequest("speed: 'fast' is not available for model %s", p.info.ID)
	}
	return nil
}

// checkBilling checks billing_policy and the anthropic-user-profile-id
// header: bill_to "user_profile" needs the header, a profile must exist
// (Options.UserProfiles), and billing it must be allowed. count_tokens is
// never billed, so only the first two apply there.
func (p *parsed) checkBilling(bp gjson.Result, h http.Header, opts *Options, countTokens bool) *reqError {
	billProfile := false
	if bp.Exists() && bp.Type != gjson.Null {
		if opts.BillingPolicyNeedsBeta && !slices.Contains(p.betas, BetaUserProfilesBilling) {
			return badRequest("billing_policy: requires the anthropic-beta header %q", BetaUserProfilesBilling)
		}
		if !bp.IsObject() {
			return badRequest("billing_policy: Input should be an object")
		}
		if e := onlyFields(bp, "billing_policy", "type", "bill_to"); e != nil {
			return e
		}
		if t := bp.Get("type"); t.Type != gjson.String || t.Str != "billing_policy" {
			return badRequest("billing_policy.type: Input should be 'billing_policy'")
		}
		switch b := bp.Get("bill_to"); {
		case !b.Exists() || b.Type == gjson.Null || (b.Type == gjson.String && b.Str == "self"):
		case b.Type == gjson.String && b.Str == "user_profile":
			billProfile = true
		default:
			return badRequest("billing_policy.bill_to: Input should be 'self' or 'user_profile'")
		}
	}
	profile := h.Get(HeaderUserProfile)
	if profile == "" {
		if billProfile {
			return codedReqError(CodeProfileRequired)
		}
		return nil
	}
	if opts.UserProfiles == nil {
		return nil
	}
	state, ok := opts.UserProfiles[profile]
	switch {
	case !ok:
		return codedReqError(CodeProfileNotFound)
	case billProfile && !countTokens && state != "" && state != "ok":
		return codedReqError(state)
	}
	return nil
}

// keyError answers a request whose credential Options.KeyErrors lists:
// /v1/messages with any code, count_tokens with the organization's own.
func (a *API) keyError(w http.ResponseWriter, req *http.Request, r *Request, countTokens bool) bool {
	a.mu.Lock()
	code := a.opts.KeyErrors[r.Credential]
	a.mu.Unlock()
	if code == "" || (countTokens && !modelsErrorCodes[code]) {
		return false
	}
	a.answerCoded(w, req, r, code)
	return true
}
