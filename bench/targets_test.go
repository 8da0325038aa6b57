package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHistoryLog(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		files map[string]string
		lines int
		size  int64
	}{
		{"no history folder", nil, 0, 0},
		{"tenant logs only", map[string]string{"memory.jsonl": "{}\n{}\n", "other.jsonl": "{\"t\":1}\n", "memory.jsonl.tmp": "{}\n"}, 3, 14},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := filepath.Join(dir, string(rune('a'+i)))
			for name, body := range tt.files {
				os.MkdirAll(d, 0o755)
				if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			lines, size, err := historyLog(d)
			if err != nil || lines != tt.lines || size != tt.size {
				t.Errorf("historyLog = %d lines, %d bytes, %v; want %d, %d", lines, size, err, tt.lines, tt.size)
			}
		})
	}
}

// TestFeatureCost: each feature row is printed against its off row, and a
// pair missing either row is left out.
func TestFeatureCost(t *testing.T) {
	mk := func(id string, rps float64, cpu time.Duration) *cell {
		return &cell{row: rowSpec{id: id}, load: "small", rps: rps, cpu: cpu * 1000, cpuN: 1000, p50: 300 * time.Microsecond}
	}
	r := &runner{cells: []*cell{mk("4", 1000, 100*time.Microsecond), mk("4t", 800, 150*time.Microsecond)}}
	var b strings.Builder
	r.featureCost(&b)
	got := b.String()
	want := "- tracing on, every request sampled and exported: row 4t vs row 4: CPU/req 150µs vs 100µs (1.50×), req/s 800 vs 1000 (0.80×), p50 at one worker +0µs"
	if !strings.Contains(got, want) {
		t.Errorf("featureCost:\n%s\nwant a line\n%s", got, want)
	}
	if strings.Contains(got, "4c0") || strings.Contains(got, "5h") {
		t.Errorf("featureCost printed rows that did not run:\n%s", got)
	}
}
