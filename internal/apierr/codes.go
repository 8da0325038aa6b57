package apierr

import "slices"

// Error codes the API sends in error.details.error_code (the December 2026 API reference, "New error
// codes a relay must pass through"). A relay passes them on unchanged; ctxproxy only reads them to
// decide about its own retry and to name errors in its metrics.
const (
	CodeContractSpendLimit          = "contract_spend_limit_reached"            // 429
	CodeEnforcedSpendLimit          = "enforced_spend_limit_reached"            // 429
	CodeRampLimit                   = "ramp_limit_exceeded"                     // 429, retry after retry-after
	CodeLinkedOrgSpendLimit         = "linked_organization_spend_limit_reached" // 402
	CodeLinkedOrgBillingUnavailable = "linked_organization_billing_unavailable" // 402
)

// codes are the codes the API documents (the pinned SDKs' error classes); any other is named
// "other" in metrics, so a hostile upstream cannot grow their label sets.
var codes = []string{
	CodeContractSpendLimit, CodeEnforcedSpendLimit, CodeRampLimit,
	CodeLinkedOrgSpendLimit, CodeLinkedOrgBillingUnavailable,
	"user_profile_billing_not_authorized", "user_profile_not_billable",
	"user_profile_required", "user_profile_not_found",
	"request_body_too_large_after_decoding", "request_body_encoding_invalid",
	"request_body_encoding_unsupported", "organization_url_fetch_disabled",
	"image_dimensions_too_large", "storage_not_ready",
	"claude_code_key_creator_not_member", "organization_on_hold",
}

// knownTypes are the SDKs' error.type values and request_too_large.
var knownTypes = []string{
	"invalid_request_error", "authentication_error", "billing_error", "permission_error",
	"not_found_error", "rate_limit_error", "timeout_error", "api_error", "overloaded_error",
	"request_too_large", "conflict_error", "memory_precondition_failed_error",
	"memory_path_conflict_error",
}

// SpendLimit reports whether code says a spend limit was reached. These are never retried: a
// spend limit does not lift in seconds, and a retry only spends the client's time.
func SpendLimit(code string) bool {
	switch code {
	case CodeContractSpendLimit, CodeEnforcedSpendLimit, CodeLinkedOrgSpendLimit, CodeLinkedOrgBillingUnavailable:
		return true
	}
	return false
}

// TypeLabel is typ as a bounded metrics label: a known error.type, "none" when empty, else
// "other".
func TypeLabel(typ string) string { return label(typ, knownTypes) }

// CodeLabel is code as a bounded metrics label: a documented code, "none" when empty, else
// "other".
func CodeLabel(code string) string { return label(code, codes) }

func label(s string, known []string) string {
	switch s {
	case "", "none":
		return "none"
	case "other":
		return "other" // a label already bounded stays as it is
	}
	if i := slices.Index(known, s); i >= 0 {
		return known[i] // the constant, never the caller's (possibly pooled) bytes
	}
	return "other"
}
