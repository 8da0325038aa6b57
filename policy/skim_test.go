package policy

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// escapesByByte is escapedBy's reference: it walks the blocks byte by byte and marks every byte a
// backslash escapes.
func escapesByByte(b []byte) (escaped []bool) {
	escaped = make([]bool, len(b))
	next := false
	for i, c := range b {
		switch {
		case next:
			escaped[i], next = true, false
		case c == '\\':
			next = true
		}
	}
	return escaped
}

func TestEscapedBy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 2000 {
		// Blocks of backslashes and x's, in runs long and short, so runs cross block edges
		// with either parity.
		b := make([]byte, 64*4)
		density := rng.IntN(8)
		for i := range b {
			if rng.IntN(8) < density {
				b[i] = '\\'
			} else {
				b[i] = 'x'
			}
		}
		if run%7 == 0 {
			for i := 60; i < 200; i++ {
				b[i] = '\\'
			}
		}
		want := escapesByByte(b)
		var carry uint64
		for k := 0; k < len(b); k += 64 {
			var bs uint64
			for i, c := range b[k : k+64] {
				if c == '\\' {
					bs |= 1 << i
				}
			}
			var esc uint64
			esc, carry = escapedBy(bs, carry)
			for i := range 64 {
				if b[k+i] == '\\' {
					continue // escapedBy leaves out escaped backslashes, except a block's first byte
				}
				if got := esc>>i&1 == 1; got != want[k+i] {
					t.Fatalf("run %d: byte %d escaped=%v, want %v\n%s", run, k+i, got, want[k+i], b)
				}
			}
		}
	}
}

// skimKernel is one of the block walks skimBlocks may run (skimKernels lists this CPU's).
type skimKernel struct {
	name   string
	avx512 bool
}

func TestSkimBlocks(t *testing.T) {
	for _, k := range skimKernels() {
		t.Run(k.name+" agrees with the plain Go walk from any state", func(t *testing.T) {
			defer useSkimKernel(k)()
			testSkimBlocks(t)
		})
	}
}

func testSkimBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 64*8)
	for run := range 2000 {
		density := 1 + rng.IntN(64)
		for i := range src {
			src[i] = byte(rng.UintN(256))
			if rng.IntN(64) < density {
				src[i] = `"\\[]{}`[rng.IntN(7)]
			}
		}
		n := rng.IntN(9)
		st := blockState{escaped: rng.Uint64() & 1, inStr: -(rng.Uint64() & 1)}
		strMask := -(rng.Uint64() & 1)
		gotSt, wantSt := st, st
		gotK, gotEv := skimBlocks(src[:n*64], &gotSt, strMask)
		wantK, wantEv := skimBlocksGeneric(src[:n*64], &wantSt, strMask)
		if gotK != wantK || gotEv != wantEv || gotSt != wantSt {
			t.Fatalf("run %d, %d blocks from %+v, strMask %x: got block %d events %x state %+v, want %d %x %+v",
				run, n, st, strMask, gotK, gotEv, gotSt, wantK, wantEv, wantSt)
		}
	}
}

// skimCase builds bodies whose strings, escapes and brackets fall on and across 64-byte block edges.
func skimCases() []string {
	cases := []string{
		`"abc"`, `[]`, `{}`, `[[{}]]`, `["a\"]"]`, `["a\\"]`, `["a\\\"]"]`, `"\\\\"`,
		`["abc\"]`, `[[1]`, `[{"a":1]]`, `{"a":[}`, `[` + strings.Repeat(`"x",`, 40) + `"]"]`,
	}
	for pad := range 140 {
		p := strings.Repeat("y", pad)
		for bs := range 5 {
			s := strings.Repeat(`\`, bs)
			cases = append(cases,
				`"`+p+s+`"`+`tail"`,
				`["`+p+s+`"]"]`,
				`[`+p+`{"`+s+`":[`+p+`]}]`,
				`{"k":"`+p+s+`"}`+p,
			)
		}
	}
	return cases
}

func TestSkimValueBlocksAgreesWithBytes(t *testing.T) {
	for _, c := range skimCases() {
		b := []byte(c)
		gotOff, gotErr := skimValueBlocks(b, 0, 0)
		wantOff, wantErr := skimValueBytes(b, 0, 0)
		if gotOff != wantOff || (gotErr == nil) != (wantErr == nil) || gotErr != nil && *gotErr != *wantErr {
			t.Fatalf("skim %q: blocks %d %+v, bytes %d %+v", c, gotOff, gotErr, wantOff, wantErr)
		}
	}
}

func TestSkimValueNesting(t *testing.T) {
	for _, skim := range []struct {
		name string
		f    func([]byte, int, int) (int, *scanError)
	}{{"blocks", skimValueBlocks}, {"bytes", skimValueBytes}} {
		t.Run(skim.name+" refuses one level too deep and accepts the limit", func(t *testing.T) {
			at := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
			if _, e := skim.f(at(maxDepth-3), 0, 3); e != nil {
				t.Fatalf("at the limit: %+v", e)
			}
			_, e := skim.f(at(maxDepth-2), 0, 3)
			if e == nil || e.off != maxDepth-3 {
				t.Fatalf("past the limit: %+v", e)
			}
		})
	}
}

// FuzzSkimValue: where no backslash stands outside a string (always so in valid JSON), the block
// skim and the byte skim agree on every input, errors included.
func FuzzSkimValue(f *testing.F) {
	for _, c := range skimCases()[:40] {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' && b[0] != '[' && b[0] != '{' {
			return
		}
		gotOff, gotErr := skimValueBlocks(b, 0, 0)
		wantOff, wantErr := skimValueBytes(b, 0, 0)
		if gotOff < 0 || gotOff > len(b) {
			t.Fatalf("offset %d outside %q", gotOff, b)
		}
		if bytes.IndexByte(b, '\\') >= 0 && !json.Valid(b) {
			return
		}
		if gotOff != wantOff || (gotErr == nil) != (wantErr == nil) || gotErr != nil && *gotErr != *wantErr {
			t.Fatalf("skim %q: blocks %d %+v, bytes %d %+v", b, gotOff, gotErr, wantOff, wantErr)
		}
	})
}

// FuzzSkimBlocks: the vector block walk agrees with the plain Go one from any state.
func FuzzSkimBlocks(f *testing.F) {
	f.Add(bytes.Repeat([]byte(`{"a":"\\\"[x]"}`), 10), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, state uint8) {
		st := blockState{escaped: uint64(state & 1), inStr: -uint64(state >> 1 & 1)}
		strMask := -uint64(state >> 2 & 1)
		for _, k := range skimKernels() {
			restore := useSkimKernel(k)
			gotSt, wantSt := st, st
			gotK, gotEv := skimBlocks(b, &gotSt, strMask)
			wantK, wantEv := skimBlocksGeneric(b, &wantSt, strMask)
			restore()
			if gotK != wantK || gotEv != wantEv || gotSt != wantSt {
				t.Fatalf("%s: %q from %+v, strMask %x: got block %d events %x state %+v, want %d %x %+v",
					k.name, b, st, strMask, gotK, gotEv, gotSt, wantK, wantEv, wantSt)
			}
		}
	})
}

func TestValueEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    string
		i    int
		end  int
		ok   bool
	}{
		{"a string", `"a\"b" ,`, 0, 6, true},
		{"an array with strings holding brackets", `[1,"]",{"a":"}"}] x`, 0, 17, true},
		{"an object inside a body", `{"m":{"a":[1]}}`, 5, 14, true},
		{"a number is not skimmed", `12`, 0, 0, false},
		{"a literal is not skimmed", `null`, 0, 0, false},
		{"an unterminated string", `"abc`, 0, 0, false},
		{"an unclosed array", `[1,2`, 0, 0, false},
		{"past the end", `"a"`, 3, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end, ok := ValueEnd([]byte(tc.b), tc.i)
			if ok != tc.ok || ok && end != tc.end {
				t.Errorf("ValueEnd(%q, %d) = %d, %v; want %d, %v", tc.b, tc.i, end, ok, tc.end, tc.ok)
			}
		})
	}
}
