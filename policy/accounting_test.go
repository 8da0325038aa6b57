package policy

import (
	"strings"
	"testing"
)

func TestCacheDiagnosticsDefaultsToWhetherThePolicyClears(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       bool
	}{
		{"a policy that clears tool uses asks", "tenant: t\ncontext_management:\n  clear_tool_uses: {}\n", true},
		{"a policy that clears thinking asks", "tenant: t\ncontext_management:\n  clear_thinking: {}\n", true},
		{"a policy without edits does not", "tenant: t\n", false},
		{"a policy that leaves context_management alone does not", "tenant: t\ncontext_management:\n  mode: off\n", false},
		{"false turns it off", "tenant: t\ncontext_management:\n  clear_tool_uses: {}\naccounting:\n  cache_diagnostics: false\n", false},
		{"true turns it on without edits", "tenant: t\naccounting: {cache_diagnostics: true}\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.yaml).CacheDiagnostics(); got != tt.want {
				t.Errorf("CacheDiagnostics() = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("a wrong value is a load error with its line", func(t *testing.T) {
		_, err := Parse("t.yaml", []byte("tenant: t\naccounting:\n  cache_diagnostics: sometimes\n"))
		if err == nil || !strings.Contains(err.Error(), "3") || !strings.Contains(err.Error(), "accounting.cache_diagnostics") {
			t.Errorf("err = %v", err)
		}
		_, err = Parse("t.yaml", []byte("tenant: t\naccounting:\n  diagnostics: true\n"))
		if err == nil || !strings.Contains(err.Error(), "diagnostics") {
			t.Errorf("unknown key: err = %v", err)
		}
	})
	if (*Policy)(nil).CacheDiagnostics() {
		t.Error("no policy asks")
	}
}
