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

// TestScanSkimBulkWithAVX2 runs the skim's cases through the AVX2 block walk on a CPU that would
// run the AVX-512 one.
func TestScanSkimBulkWithAVX2(t *testing.T) {
	if !skim512 {
		t.Skip("this CPU runs the AVX2 block walk (or none) in every test already")
	}
	defer useSkimKernel(skimKernel{name: "avx2"})()
	TestScanSkimBulk(t)
	TestBenchBodiesAreValidRequests(t)
}

// skimKernels lists the block walks this CPU runs: the plain Go one without AVX2, else AVX2 and,
// where the CPU takes it, AVX-512.
func skimKernels() []skimKernel {
	if !vectorSkim {
		return []skimKernel{{name: "generic"}}
	}
	ks := []skimKernel{{name: "avx2"}}
	if skim512 {
		ks = append(ks, skimKernel{name: "avx512", avx512: true})
	}
	return ks
}

// useSkimKernel makes skimBlocks run k and returns what undoes it.
func useSkimKernel(k skimKernel) (restore func()) {
	old := skim512
	skim512 = k.avx512
	return func() { skim512 = old }
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
