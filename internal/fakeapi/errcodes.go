package fakeapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"
)

// Error codes the API sends in error.details.error_code (the December 2026 API reference's new-error-codes section; the
// pinned SDKs' ERROR_CODE_CLASSES pair each with its status). The fake
// answers the ones it models by itself (request_body_*, user_profile_*,
// linked_organization_*) and any of them when scripted: ErrorCodeReply,
// {"error_code":...} in a scripted Reply's JSON, or Options.KeyErrors.
const (
	CodeContractSpendLimit          = "contract_spend_limit_reached"
	CodeEnforcedSpendLimit          = "enforced_spend_limit_reached"
	CodeRampLimit                   = "ramp_limit_exceeded"
	CodeLinkedOrgSpendLimit         = "linked_organization_spend_limit_reached"
	CodeLinkedOrgBillingUnavailable = "linked_organization_billing_unavailable"
	CodeProfileNotAuthorized        = "user_profile_billing_not_authorized"
	CodeProfileNotBillable          = "user_profile_not_billable"
	CodeProfileRequired             = "user_profile_required"
	CodeProfileNotFound             = "user_profile_not_found"
	CodeTooLargeAfterDecoding       = "request_body_too_large_after_decoding"
	CodeEncodingInvalid             = "request_body_encoding_invalid"
	CodeEncodingUnsupported         = "request_body_encoding_unsupported"
	CodeURLFetchDisabled            = "organization_url_fetch_disabled"
	CodeImageTooLarge               = "image_dimensions_too_large"
	CodeStorageNotReady             = "storage_not_ready"
	CodeKeyCreatorNotMember         = "claude_code_key_creator_not_member"
	CodeOrganizationOnHold          = "organization_on_hold"
)

// codeInfo is how the API answers one code. The status is the SDKs'; the
// error.type follows the status (no SDK ties a type to a code: unverified
// per code, the December 2026 API reference's new-error-codes section). header holds what the code's documentation
// asks the client to honour.
type codeInfo struct {
	status  int
	typ     string
	message string
	header  map[string]string
}

var errorCodes = map[string]codeInfo{
	CodeContractSpendLimit: {429, "rate_limit_error", "Your organization has reached the spend limit of its contract.", nil},
	CodeEnforcedSpendLimit: {429, "rate_limit_error", "Your organization has crossed the monthly usage threshold of its API tier.", nil},
	CodeRampLimit: {429, "rate_limit_error", "This request would exceed a ramp limit, which caps how fast usage can grow. Retry after the time in the retry-after header.",
		map[string]string{"Retry-After": "30"}},
	CodeLinkedOrgSpendLimit:         {402, "billing_error", "The organization linked to this request's user profile has reached a spend limit it set, or lacks credit for the request.", nil},
	CodeLinkedOrgBillingUnavailable: {402, "billing_error", "The organization linked to this request's user profile cannot be billed at this time.", nil},
	CodeProfileNotAuthorized:        {403, "permission_error", "The customer behind this user profile has not authorized your organization to bill them.", nil},
	CodeProfileNotBillable:          {403, "permission_error", "This user profile cannot be billed.", nil},
	CodeProfileRequired:             {400, "invalid_request_error", `billing_policy.bill_to is "user_profile" but the request names no user profile; send the anthropic-user-profile-id header.`, nil},
	CodeProfileNotFound:             {400, "invalid_request_error", "The user profile named by the anthropic-user-profile-id header does not exist or is no longer active.", nil},
	CodeTooLargeAfterDecoding:       {413, "request_too_large", "The decoded request body exceeds the maximum allowed number of bytes.", nil},
	CodeEncodingInvalid:             {400, "invalid_request_error", "The request body is not valid for its Content-Encoding.", nil},
	CodeEncodingUnsupported:         {400, "invalid_request_error", "The request's Content-Encoding is not supported.", nil},
	CodeURLFetchDisabled:            {400, "invalid_request_error", "URL sources, web_fetch and mcp_servers are turned off for your organization.", nil},
	CodeImageTooLarge:               {400, "invalid_request_error", "An image in the request is too large in pixels.", nil},
	CodeStorageNotReady: {503, "api_error", "This workspace is still being connected to its storage. Try again in a minute.",
		map[string]string{"Retry-After": "60"}},
	CodeKeyCreatorNotMember: {400, "invalid_request_error", "The user who created this Claude Code API key is no longer a member of its organization or workspace.", nil},
	CodeOrganizationOnHold:  {400, "invalid_request_error", "This organization has been disabled.", nil},
}

// spendCodes are the spend limits: a relay must never retry them.
var spendCodes = []string{CodeContractSpendLimit, CodeEnforcedSpendLimit, CodeLinkedOrgSpendLimit}

// modelsErrorCodes are the codes the SDKs document on GET /v1/models*.
var modelsErrorCodes = map[string]bool{CodeKeyCreatorNotMember: true, CodeOrganizationOnHold: true}

// ErrorCodes lists the codes ErrorCodeReply knows, sorted.
func ErrorCodes() []string {
	out := make([]string, 0, len(errorCodes))
	for c := range errorCodes {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// codedError is the status and error object for code; an unknown code is a
// 400 invalid_request_error carrying it (what a client must treat as the
// bare type).
func codedError(code string) (int, *APIError, codeInfo) {
	info, ok := errorCodes[code]
	if !ok {
		info = codeInfo{status: 400, typ: "invalid_request_error", message: "Request failed (" + code + ")."}
	}
	return info.status, &APIError{Type: info.typ, Message: info.message,
		Details: json.RawMessage(`{"error_code":` + strconv.Quote(code) + `}`)}, info
}

func codedReqError(code string) *reqError {
	st, e, _ := codedError(code)
	return &reqError{st, e}
}

// ErrorCodeReply is a scripted error reply answering with code, its status,
// error.type and message; the code's headers (retry-after for
// ramp_limit_exceeded and storage_not_ready, x-should-retry under
// Options.SpendLimitsNoRetry) are added when it is served.
func ErrorCodeReply(code string) Reply {
	st, e, _ := codedError(code)
	return Reply{Status: st, Error: e}
}

// addCodeHeaders adds the headers that go with an error's code, keeping any
// the reply already has.
func addCodeHeaders(h http.Header, e *APIError, spendNoRetry bool) {
	if e == nil || len(e.Details) == 0 {
		return
	}
	code := gjson.GetBytes(e.Details, "error_code").Str
	for k, v := range errorCodes[code].header {
		if h.Get(k) == "" {
			h.Set(k, v)
		}
	}
	// Unverified whether the API sends it with the spend codes (the December 2026 API
	// reference's new-error-codes section); without it the SDKs retry every 429 by themselves.
	if spendNoRetry && slices.Contains(spendCodes, code) && h.Get("X-Should-Retry") == "" {
		h.Set("X-Should-Retry", "false")
	}
}

// answerCoded answers r with code's error and headers.
func (a *API) answerCoded(w http.ResponseWriter, req *http.Request, r *Request, code string) {
	st, e, _ := codedError(code)
	a.mu.Lock()
	noRetry := a.opts.SpendLimitsNoRetry
	a.mu.Unlock()
	addCodeHeaders(w.Header(), e, noRetry)
	a.answerError(w, req, r, st, e, r.ID)
}
