package policy

import "testing"

func TestCompactForMatchesAModelAndItsSnapshotsOnly(t *testing.T) {
	def := &Compact{Models: DefaultCompactModels}
	own := &Compact{Models: []string{"claude-opus-5"}}
	tests := []struct {
		name  string
		c     *Compact
		model string
		want  bool
	}{
		{"the default list compacts Opus 5.5", def, "claude-opus-5-5", true},
		{"the default list compacts a dated Fable 5.2 snapshot", def, "claude-fable-5-2-20261118", true},
		{"the default list compacts a Vertex-dated Sonnet 5", def, "claude-sonnet-5@20260722", true},
		{"the default list does not compact Haiku 5.5", def, "claude-haiku-5-5", false},
		{"the default list does not compact an unknown Opus 5.6", def, "claude-opus-5-6", false},
		{"claude-opus-5 is not claude-opus-5-5", own, "claude-opus-5-5", false},
		{"claude-opus-5 names its own snapshot", own, "claude-opus-5-20260722", true},
		{"no edit without a model", own, "", false},
		{"no edit without the compact block", nil, "claude-opus-5", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.CompactFor(tt.model); got != tt.want {
				t.Errorf("CompactFor(%q) = %v", tt.model, got)
			}
		})
	}
}
