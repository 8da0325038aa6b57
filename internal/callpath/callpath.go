// Package callpath records the calls one goroutine makes, in order, for a
// reader who wants to see the path a request takes through the code. It is
// used only through an instrumented build (see walk/, which has every
// function of the module's packages call Enter first through a go build
// overlay): an ordinary build never calls it, and then a Recording is empty.
package callpath

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Call is one function entered: its file (from the module's root), its
// name (Type.Method or func), and how deep the goroutine's recorded calls
// were when it was entered.
type Call struct {
	File, Func string
	Depth      int
	g          uint64
}

var (
	on    atomic.Bool
	mu    sync.Mutex
	calls []Call
	depth = map[uint64]int{}
)

// Enter records a call to fn in file while a recording runs, and returns
// what the call's deferred exit runs. The instrumented build puts
// `defer callpath.Enter(file, fn)()` first in every function.
func Enter(file, fn string) func() {
	if !on.Load() {
		return nop
	}
	g := goid()
	mu.Lock()
	calls = append(calls, Call{File: file, Func: fn, Depth: depth[g], g: g})
	depth[g]++
	mu.Unlock()
	return func() {
		mu.Lock()
		depth[g]--
		mu.Unlock()
	}
}

func nop() {}

// Start begins a recording.
func Start() {
	mu.Lock()
	calls, depth = nil, map[uint64]int{}
	mu.Unlock()
	on.Store(true)
}

// Stop ends the recording and returns the calls made on the goroutine that
// first entered fn (the request's handler, say), from that call on; none
// when the build was not instrumented or fn was never entered.
func Stop(fn string) Path {
	on.Store(false)
	mu.Lock()
	defer mu.Unlock()
	var p Path
	var g uint64
	found := false
	for _, c := range calls {
		if !found && c.Func == fn {
			found, g = true, c.g
			p.base = c.Depth
		}
		if found && c.g == g {
			p.Calls = append(p.Calls, c)
		}
	}
	return p
}

// Instrumented says whether this build calls Enter (a recording of nothing
// then means the path was not taken).
var Instrumented = false

func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

// Path is the calls of one goroutine, in the order they were made.
type Path struct {
	Calls []Call
	base  int
}

// Reading is the path as a reader walks it: each call from one function
// to another once, where the request first makes it (a loop's or a second
// round's repeats are read already), with what it calls.
func (p Path) Reading() Path {
	out := Path{base: p.base}
	type edge struct{ from, to string }
	seen := map[edge]bool{}
	var stack []string // the function at each depth
	for _, c := range p.Calls {
		d := c.Depth - p.base
		if d < 0 {
			continue
		}
		stack = append(stack[:min(d, len(stack))], c.File+" "+c.Func)
		from := ""
		if d > 0 && d-1 < len(stack) {
			from = stack[d-1]
		}
		e := edge{from, c.File + " " + c.Func}
		if seen[e] {
			continue
		}
		seen[e] = true
		out.Calls = append(out.Calls, c)
	}
	return out
}

// Within is the calls of the path into the files under dir ("proxy/"):
// what a reader of that folder follows, the calls it makes elsewhere read
// as the library calls they are.
func (p Path) Within(dir string) Path {
	out := Path{base: p.base}
	for _, c := range p.Calls {
		if strings.HasPrefix(c.File, dir) {
			out.Calls = append(out.Calls, c)
		}
	}
	return out
}

// Summary is the path's figures: its calls, the files they enter, and its
// back-jumps, with the files they go back to.
func (p Path) Summary() string {
	n, per := p.BackJumps()
	s := fmt.Sprintf("%d calls in %d files; %d back-jumps (↩: a call into a file already left)", len(p.Calls), p.Files(), n)
	if n > 0 {
		var parts []string
		for f, k := range per {
			parts = append(parts, fmt.Sprintf("%s %d", f, k))
		}
		slices.Sort(parts)
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// Files is the number of files the path enters.
func (p Path) Files() int {
	seen := map[string]bool{}
	for _, c := range p.Calls {
		seen[c.File] = true
	}
	return len(seen)
}

// BackJumps counts the calls into a file the path had entered before and
// left since: what a reader following the request pays to go back to a
// file already read. Calls within one file are no jump. perFile is the
// count per file re-entered.
func (p Path) BackJumps() (n int, perFile map[string]int) {
	perFile = map[string]int{}
	seen := map[string]bool{}
	cur := ""
	for _, c := range p.Calls {
		if c.File != cur && seen[c.File] {
			n++
			perFile[c.File]++
		}
		seen[c.File] = true
		cur = c.File
	}
	return n, perFile
}

// String is the path as an indented tree, a call a line, and its figures.
func (p Path) String() string {
	var b strings.Builder
	cur := ""
	seen := map[string]bool{}
	for _, c := range p.Calls {
		mark := "  "
		if c.File != cur && seen[c.File] {
			mark = "↩ "
		}
		seen[c.File] = true
		cur = c.File
		fmt.Fprintf(&b, "%s%s%s  %s\n", mark, strings.Repeat("  ", max(c.Depth-p.base, 0)), c.Func, c.File)
	}
	b.WriteString(p.Summary())
	return b.String()
}
