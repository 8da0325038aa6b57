package policy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestScanSkimBulkWithoutVectors runs the skim's cases as a CPU without AVX2 does: the byte skim
// behind scanBody.
func TestScanSkimBulkWithoutVectors(t *testing.T) {
	if !vectorSkim {
		t.Skip("this CPU runs the byte skim in every test already")
	}
	vectorSkim = false
	defer func() { vectorSkim = true }()
	TestScanSkimBulk(t)
	TestBenchBodiesAreValidRequests(t)
}

// TestSkimAsmHasNoLegacySSE keeps every instruction of skim_amd64.s that touches an X or Y
// register VEX-encoded: one legacy-SSE instruction among the AVX2 ones made each 64-byte block
// pay an SSE/AVX state transition on Intel cores (the 1 MiB skim took 2.5 ms instead of 90 µs).
func TestSkimAsmHasNoLegacySSE(t *testing.T) {
	src, err := os.ReadFile("skim_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	vreg := regexp.MustCompile(`\b[XY]\d+\b`)
	checked := 0
	for i, line := range strings.Split(string(src), "\n") {
		code, _, _ := strings.Cut(line, "//")
		fields := strings.Fields(code)
		if len(fields) < 2 || strings.HasSuffix(fields[0], ":") || !vreg.MatchString(code) {
			continue
		}
		checked++
		if op := fields[0]; !strings.HasPrefix(op, "V") {
			t.Errorf("skim_amd64.s:%d: %s is a legacy-SSE instruction on a vector register; use its VEX form (V%s)", i+1, op, op)
		}
	}
	if checked < 10 {
		t.Fatalf("found %d vector instructions in skim_amd64.s; the check reads the file wrong", checked)
	}
}
