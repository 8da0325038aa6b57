package modelid

import "testing"

func TestMatches(t *testing.T) {
	tests := []struct {
		id, model string
		want      bool
	}{
		{"claude-opus-5", "claude-opus-5", true},
		{"claude-opus-5-20261201", "claude-opus-5", true},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5", true},
		{"claude-opus-5-5", "claude-opus-5", false},
		{"claude-opus-5-5-20261201", "claude-opus-5", false},
		{"claude-sonnet-4-50", "claude-sonnet-4-5", false},
		{"claude-fable-5-1", "claude-fable-5", false},
		{"claude-opus-5-latest", "claude-opus-5", false},
		{"claude-opus-5-2026120", "claude-opus-5", false},   // seven digits: not a date
		{"claude-opus-5-202612011", "claude-opus-5", false}, // nine digits
		{"claude-opus-5-2026120x", "claude-opus-5", false},
		{"claude-opus-5_20261201", "claude-opus-5", false},
		{"claude-opus-5", "claude-opus-5-5", false},
		{"-20261201", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		name := tt.id + " is not " + tt.model
		if tt.want {
			name = tt.id + " is " + tt.model
		}
		t.Run(name, func(t *testing.T) {
			if got := Matches(tt.id, tt.model); got != tt.want {
				t.Errorf("Matches(%q, %q) = %v", tt.id, tt.model, got)
			}
		})
	}
}

func TestBase(t *testing.T) {
	for id, want := range map[string]string{
		"claude-haiku-4-5-20251001":  "claude-haiku-4-5",
		"claude-haiku-4-5@20251001":  "claude-haiku-4-5",
		"claude-haiku-4-5":           "claude-haiku-4-5",
		"20251001":                   "20251001",
		"-20251001":                  "-20251001",
		"claude-3-haiku-20240307":    "claude-3-haiku",
		"claude-mythos-5-1-20260101": "claude-mythos-5-1",
	} {
		if got := Base(id); got != want {
			t.Errorf("Base(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestAny(t *testing.T) {
	ms := []string{"claude-opus-5", "claude-sonnet-5"}
	if !Any("claude-sonnet-5-20261201", ms) || Any("claude-sonnet-5-5", ms) || Any("claude-opus-5", nil) {
		t.Error("Any disagrees with Matches")
	}
}
