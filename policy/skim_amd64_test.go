package policy

import "testing"

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
