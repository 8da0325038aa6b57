package policy

import (
	"bytes"
	"fmt"
	"math/bits"
)

// The skim of a bulk value (scanSkimBulk) only needs where each string ends and where the brackets
// outside strings are. On a long transcript most of the bytes are string contents, and a third of
// the quotes in them are escaped (`\"` in code), so stopping at every quote costs more than reading
// the bytes. Where the CPU has the vector instructions for it (skim_amd64.s), skimValue works 64
// bytes at a time instead, as simdjson does: a block's quotes, backslashes and brackets become bit
// masks, escapes and string interiors are worked out with integer arithmetic over the masks, and
// the loop stops only at a block with a bracket outside strings. Elsewhere it stops at each quote
// (skimValueBytes). skimBlocksGeneric is the block walk in plain Go, the reference the vector code
// is tested against.

// blockMasks marks, bit i for byte i, the quotes, backslashes and brackets ([ ] { }) of one
// 64-byte block.
type blockMasks struct {
	quotes, backslashes, brackets uint64
}

const (
	evenBits = 0x5555555555555555
	oddBits  = ^uint64(evenBits)
)

// masksOf classifies the first 64 bytes of src.
func masksOf(src []byte) blockMasks {
	var m blockMasks
	for i, c := range src[:64] {
		bit := uint64(1) << i
		switch c {
		case '"':
			m.quotes |= bit
		case '\\':
			m.backslashes |= bit
		case '[', ']', '{', '}':
			m.brackets |= bit
		}
	}
	return m
}

// escapedBy returns the bytes of a block escaped by a backslash (the byte after each odd-length
// run of backslashes; a run's own escaped backslashes do not matter to the skim) and whether the
// first byte of the next block is escaped. carry says whether this block's first byte is escaped.
//
// A run starting at bit s and ending before bit e escapes bit e when e-s is odd. Adding the run's
// start bit to the mask carries through the run and lands on e, so runs starting on even and odd
// bits are added separately and e's parity is read off the landing bits.
func escapedBy(backslashes, carry uint64) (escaped, next uint64) {
	bs := backslashes &^ carry // an escaped backslash escapes nothing
	starts := bs &^ (bs << 1)
	evenEnds := (bs + starts&evenBits) &^ bs
	oddSum, overflow := bits.Add64(bs, starts&oddBits, 0)
	oddEnds := oddSum &^ bs
	return evenEnds&oddBits | oddEnds&evenBits | carry, overflow
}

// prefixXOR sets bit i when an odd number of bits 0..i of x are set: with x the unescaped quotes,
// the bytes inside strings (opening quote included, closing quote not).
func prefixXOR(x uint64) uint64 {
	x ^= x << 1
	x ^= x << 2
	x ^= x << 4
	x ^= x << 8
	x ^= x << 16
	x ^= x << 32
	return x
}

// blockState carries what a block's bytes depend on in the blocks before it.
type blockState struct {
	escaped uint64 // 1 when the block's first byte is escaped
	inStr   uint64 // all ones when the block starts inside a string
}

// step returns a block's unescaped quotes and its brackets outside strings, and moves the state
// past the block.
func (s *blockState) step(m *blockMasks) (quotes, brackets uint64) {
	var esc uint64
	if m.backslashes|s.escaped != 0 {
		esc, s.escaped = escapedBy(m.backslashes, s.escaped)
	}
	quotes = m.quotes &^ esc
	in := prefixXOR(quotes) ^ s.inStr
	s.inStr = uint64(int64(in) >> 63)
	return quotes, m.brackets &^ in
}

// skimBlocksGeneric walks the whole 64-byte blocks of src, moving st past each, and stops at the
// first block with an event: an unescaped quote when strMask is all ones (the end of the string
// being skimmed), else a bracket outside strings. It returns that block's index and its events,
// or the number of blocks and 0.
func skimBlocksGeneric(src []byte, st *blockState, strMask uint64) (k int, events uint64) {
	for k = 0; k < len(src)/64; k++ {
		m := masksOf(src[k*64:])
		quotes, brackets := st.step(&m)
		if events = quotes&strMask | brackets&^strMask; events != 0 {
			return k, events
		}
	}
	return k, 0
}

// skimValue returns the offset after the string, array or object at i, which sits at nesting depth
// depth. It checks only what fixes the value's extent: strings end at an unescaped quote, brackets
// balance and match, nesting stays within maxDepth. Bytes outside strings are not checked, so a
// stray backslash there (invalid JSON, the API's to refuse) may escape what follows it.
func skimValue(b []byte, i, depth int) (int, *scanError) {
	if !vectorSkim {
		return skimValueBytes(b, i, depth)
	}
	return skimValueBlocks(b, i, depth)
}

// skimValueBlocks is skimValue by 64-byte blocks (skimBlocks): the loop stops only at a block
// holding the string's end or a bracket outside strings. The last partial block is skimmed
// through a zero-padded copy, so no event lies past the body.
func skimValueBlocks(b []byte, i, depth int) (int, *scanError) {
	var v valueSkim
	v.start(b, i, depth)
	return v.walk(b, true)
}

// valueSkim is skimValueBlocks' walk, resumable: a Lead feeds it a body as it arrives, whole
// blocks at a time, and the body's final skim picks up where it stopped.
type valueSkim struct {
	s        blockState
	strMask  uint64 // all ones while skimming a string's contents
	base     int    // the next block's offset: every byte before it is inside the value
	depth    int
	n        int    // the open brackets in stackBuf
	big      []byte // the open brackets, once more than stackBuf holds
	stackBuf [64]byte
}

// start begins the skim of the string, array or object at b[i], at nesting depth depth.
func (v *valueSkim) start(b []byte, i, depth int) {
	*v = valueSkim{depth: depth}
	if b[i] == '"' {
		i++ // the string's contents; its end is the first unescaped quote
		v.s.inStr, v.strMask = ^uint64(0), ^uint64(0)
	}
	v.base = i
}

// walk skims on through b, which holds every byte the walk has seen so far and perhaps more. It
// returns the offset after the value, or 0 when the value goes on past b's whole blocks; with
// final, b is the whole body: its last partial block is skimmed too and a value that goes on
// past it is an error.
func (v *valueSkim) walk(b []byte, final bool) (int, *scanError) {
	stack := v.big
	if stack == nil {
		stack = v.stackBuf[:v.n]
	}
	s := v.s // the hot loop's state in locals, not behind v
	end, err, base, stack := skimFrom(b, final, v.base, &s, v.strMask, stack, v.depth)
	v.s, v.base = s, base
	if cap(stack) > len(v.stackBuf) {
		v.big = append(v.big[:0], stack...) // a copy: v never points into itself
	}
	v.n = len(stack)
	return end, err
}

// skimFrom is walk's loop, from the block at base.
func skimFrom(b []byte, final bool, base int, s *blockState, strMask uint64, stack []byte, depth int) (int, *scanError, int, []byte) {
	var tail [64]byte
	for base < len(b) {
		src := b[base : base+(len(b)-base)&^63]
		if len(src) == 0 {
			if !final {
				return 0, nil, base, stack
			}
			clear(tail[copy(tail[:], b[base:]):])
			src = tail[:]
		}
		k, events := skimBlocks(src, s, strMask)
		base += k * 64
		if events == 0 {
			continue
		}
		if strMask != 0 {
			return base + bits.TrailingZeros64(events) + 1, nil, base, stack
		}
		for ; events != 0; events &= events - 1 {
			j := base + bits.TrailingZeros64(events)
			var e *scanError
			if stack, e = skimBracket(stack, b, j, depth); e != nil || len(stack) == 0 {
				return j + 1, e, base, stack
			}
		}
		base += 64
	}
	if !final {
		return 0, nil, base, stack
	}
	return len(b), &scanError{len(b), "unexpected end of JSON input"}, base, stack
}

// skimBracket applies the bracket at j to the stack of open ones: pushed, or popped when it
// closes the innermost.
func skimBracket(stack, b []byte, j, depth int) ([]byte, *scanError) {
	switch c := b[j]; c {
	case '{', '[':
		if depth+len(stack) >= maxDepth {
			return stack, &scanError{j, fmt.Sprintf("nesting deeper than %d levels", maxDepth)}
		}
		return append(stack, c), nil
	default: // '}' or ']'
		if open := stack[len(stack)-1]; open == '{' && c != '}' || open == '[' && c != ']' {
			what := "after array element"
			if open == '{' {
				what = "after object key:value pair"
			}
			return stack, &scanError{j, "invalid character " + quoteChar(c) + " " + what}
		}
		return stack[:len(stack)-1], nil
	}
}

// structural marks the bytes skimValueBytes stops at inside a container.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// skimValueBytes is skimValue stopping at every quote and bracket.
func skimValueBytes(b []byte, i, depth int) (int, *scanError) {
	if b[i] == '"' {
		return skimString(b, i+1)
	}
	var stackBuf [64]byte
	stack := stackBuf[:0]
	for i < len(b) {
		for i < len(b) && !structural[b[i]] {
			i++
		}
		if i == len(b) {
			break
		}
		if b[i] == '"' {
			var e *scanError
			if i, e = skimString(b, i+1); e != nil {
				return i, e
			}
			continue
		}
		var e *scanError
		if stack, e = skimBracket(stack, b, i, depth); e != nil || len(stack) == 0 {
			return i + 1, e
		}
		i++
	}
	return len(b), &scanError{len(b), "unexpected end of JSON input"}
}

// skimString returns the offset after the string whose opening quote is at i-1: the first quote
// not escaped by an odd run of backslashes, found with bytes.IndexByte (vectorised), contents
// unchecked.
func skimString(b []byte, i int) (int, *scanError) {
	start := i
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b), &scanError{len(b), "unexpected end of JSON input"}
		}
		q += i
		k := q
		for k > start && b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q + 1, nil
		}
		i = q + 1
	}
}

// ValueEnd is the offset after the JSON string, array or object at b[i], found as the validating
// pass finds it (64 bytes at a time where the CPU can): the proxy reads where a value of a body
// the rewrite accepted ends without parsing what is inside it. Not ok when b[i] opens none of
// them or the value does not end in b.
func ValueEnd(b []byte, i int) (int, bool) {
	if i < 0 || i >= len(b) || (b[i] != '"' && b[i] != '[' && b[i] != '{') {
		return 0, false
	}
	end, err := skimValue(b, i, 0)
	return end, err == nil && end > i && end <= len(b)
}
