package apierr

import "testing"

func TestSpendLimitCodesAreTheFourSpendLimits(t *testing.T) {
	for code, want := range map[string]bool{
		"contract_spend_limit_reached":            true,
		"enforced_spend_limit_reached":            true,
		"linked_organization_spend_limit_reached": true,
		"linked_organization_billing_unavailable": true,
		"ramp_limit_exceeded":                     false,
		"storage_not_ready":                       false,
		"":                                        false,
	} {
		if got := SpendLimit(code); got != want {
			t.Errorf("SpendLimit(%q) = %v", code, got)
		}
	}
}

func TestLabelsAreBounded(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{CodeLabel("ramp_limit_exceeded"), "ramp_limit_exceeded"},
		{CodeLabel(""), "none"},
		{CodeLabel("made_up_by_an_upstream"), "other"},
		{TypeLabel("billing_error"), "billing_error"},
		{TypeLabel("x"), "other"},
		{TypeLabel(""), "none"},
	} {
		if tt.got != tt.want {
			t.Errorf("label %q, want %q", tt.got, tt.want)
		}
	}
}
