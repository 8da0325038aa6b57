package callpath

import "testing"

func TestAReaderReadsEachCallOnceAndCountsTheFilesGoneBackTo(t *testing.T) {
	// serve (a.go) calls read (b.go), logs (a.go), reads again, then calls
	// write (c.go), which calls a helper back in a.go: the second read is
	// read already; log and helper are jumps back to a.go.
	p := Path{Calls: []Call{
		{File: "a.go", Func: "serve", Depth: 0},
		{File: "b.go", Func: "read", Depth: 1},
		{File: "b.go", Func: "fill", Depth: 2},
		{File: "a.go", Func: "log", Depth: 1},
		{File: "b.go", Func: "read", Depth: 1},
		{File: "b.go", Func: "fill", Depth: 2},
		{File: "c.go", Func: "write", Depth: 1},
		{File: "a.go", Func: "helper", Depth: 2},
	}}
	tests := []struct {
		name        string
		path        Path
		calls, back int
	}{
		{"every call made", p, 8, 3},
		{"as a reader walks it", p.Reading(), 6, 2},
		{"within one folder", p.Reading().Within("b"), 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := tc.path.BackJumps()
			if len(tc.path.Calls) != tc.calls || n != tc.back {
				t.Fatalf("%d calls, %d back-jumps; want %d, %d\n%s", len(tc.path.Calls), n, tc.calls, tc.back, tc.path)
			}
		})
	}
}
