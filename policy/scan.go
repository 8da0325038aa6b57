package policy

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// maxDepth bounds nesting, as encoding/json does: deeper bodies are refused with a clear 400
// instead of being walked.
const maxDepth = 10000

// topMember is one member of the body's top-level object, by byte offsets.
type topMember struct {
	keyStart, keyEnd int // the key's quotes included
	valStart, valEnd int
	keyEsc           bool // the key contains escapes
}

// scanError is where and why a body is not valid JSON.
type scanError struct {
	off int
	msg string
}

// scanMode says how much of a body scanBody checks.
type scanMode uint8

const (
	// scanAll validates the whole body (RFC 8259, strings valid UTF-8).
	scanAll scanMode = iota
	// scanSkimBulk validates everything but the values of the bulk members (bulkKey): those are
	// only skimmed, for their extent, their nesting depth and balanced brackets, string contents
	// skipped in bulk (skim.go). The API validates the body in full; what the proxy must get
	// right itself (where each member ends, nesting, duplicate keys, the members it reads) is
	// still checked.
	scanSkimBulk
)

// bulkKey reports whether a top-level member is bulk: large, and read by the proxy only through
// gjson lookups that tolerate what a skim does not check (messages, system, tools). These hold
// nearly all of a long transcript's bytes; validating them would cost the proxy a full pass.
func bulkKey(k string) bool { return k == "messages" || k == "system" || k == "tools" }

// scanBody checks the body in one pass, per mode, and, when the top-level value is an object,
// appends its members to members and returns them (returned, not stored through a pointer, so a
// caller's array for them stays on its stack). It replaces gjson.Valid on the hot path because it
// says where a body goes wrong, skips what the proxy need not validate, and hands Rewrite the
// top-level members without a second pass. skimmed, when not zero, is a value already skimmed
// (by a Lead): a bulk value starting there ends there, without a second skim.
func scanBody(b []byte, members []topMember, mode scanMode, skimmed span) (_ []topMember, rootStart, rootEnd int, err *scanError) {
	i := skipWS(b, 0)
	if i == len(b) {
		return members, 0, 0, &scanError{i, "unexpected end of JSON input"}
	}
	rootStart = i
	if b[i] == '{' {
		members, i, err = scanMembers(b, i, members, mode, skimmed)
	} else {
		i, err = scanValue(b, i, 0)
	}
	if err != nil {
		return members, 0, 0, err
	}
	if rootEnd, err = scanEnd(b, skipWS(b, i)); err != nil {
		return members, 0, 0, err
	}
	return members, rootStart, rootEnd, nil
}

// scanMembers scans the top-level object that opens at b[i], appending each member to members,
// and returns the offset after its closing brace.
func scanMembers(b []byte, i int, members []topMember, mode scanMode, skimmed span) (_ []topMember, _ int, err *scanError) {
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return members, i + 1, nil
	}
	for {
		m := topMember{keyStart: i}
		if m.keyEnd, m.valStart, m.keyEsc, err = scanKey(b, i); err != nil {
			return members, 0, err
		}
		members = append(members, m)
		if i, err = scanMember(b, m, mode, skimmed); err != nil {
			return members, 0, err
		}
		members[len(members)-1].valEnd = i
		switch i = skipWS(b, i); {
		case i >= len(b):
			return members, 0, invalidAt(b, i, "")
		case b[i] == ',':
			i = skipWS(b, i+1)
		case b[i] == '}':
			return members, i + 1, nil
		default:
			return members, 0, invalidAt(b, i, "after object key:value pair")
		}
	}
}

// scanMember scans the value of the top-level member m and returns the offset after it: in
// scanSkimBulk mode a bulk member's string, array or object is skimmed (scalars are short), any
// other value is validated.
func scanMember(b []byte, m topMember, mode scanMode, skimmed span) (int, *scanError) {
	i := m.valStart
	if mode != scanSkimBulk || m.keyEsc || !bulkKey(string(b[m.keyStart+1:m.keyEnd-1])) ||
		i >= len(b) || b[i] != '"' && b[i] != '[' && b[i] != '{' {
		return scanValue(b, i, 1)
	}
	if i == skimmed.start && skimmed.end > i {
		// A Lead skimmed this value as it arrived: the same walk over the same bytes.
		return skimmed.end, nil
	}
	return skimValue(b, i, 1)
}

// scanValue validates the value at b[i], depth levels below the top, with everything nested in
// it, and returns the offset after it. It walks in three steps: a value, what follows a value, an
// object's key; stack holds the open arrays and objects.
func scanValue(b []byte, i, depth int) (_ int, err *scanError) {
	var stackBuf [64]byte
	stack := stackBuf[:0]

value:
	if i >= len(b) {
		return i, invalidAt(b, i, "")
	}
	if c := b[i]; c == '{' || c == '[' {
		if depth+len(stack) >= maxDepth {
			return i, &scanError{i, fmt.Sprintf("nesting deeper than %d levels", maxDepth)}
		}
		stack = append(stack, c)
		i = skipWS(b, i+1)
		if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
			stack = stack[:len(stack)-1]
			i++
			goto after
		}
		if c == '[' {
			goto value
		}
		goto key
	}
	if i, err = scanScalar(b, i); err != nil {
		return i, err
	}

after:
	if len(stack) == 0 {
		return i, nil
	}
	if i = skipWS(b, i); i >= len(b) {
		return i, invalidAt(b, i, "")
	}
	switch top := stack[len(stack)-1]; {
	case b[i] == ',':
		i = skipWS(b, i+1)
		if top == '[' {
			goto value
		}
		goto key
	case b[i] == '}' && top == '{', b[i] == ']' && top == '[':
		stack = stack[:len(stack)-1]
		i++
		goto after
	case top == '{':
		return i, invalidAt(b, i, "after object key:value pair")
	default:
		return i, invalidAt(b, i, "after array element")
	}

key:
	if _, i, _, err = scanKey(b, i); err != nil {
		return i, err
	}
	goto value
}

// invalidAt is the error of the byte at i, what saying where it was met, or of the input's end
// when i is past it.
func invalidAt(b []byte, i int, what string) *scanError {
	if i >= len(b) {
		return &scanError{len(b), "unexpected end of JSON input"}
	}
	return &scanError{i, fmt.Sprintf("invalid character %s %s", quoteChar(b[i]), what)}
}

// scanScalar scans the string, number or literal that starts at b[i] (i < len(b)) and returns
// the offset after it.
func scanScalar(b []byte, i int) (int, *scanError) {
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i+1)
		return end, err
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return i, invalidAt(b, i, "looking for beginning of value")
}

// scanLiteral scans the literal lit at b[i].
func scanLiteral(b []byte, i int, lit string) (int, *scanError) {
	if !hasLit(b, i, lit) {
		return i, invalidAt(b, i+litMismatch(b, i, lit), "in literal "+lit+" (expecting '"+lit+"')")
	}
	return i + len(lit), nil
}

// scanKey scans the object key at b[i] and the ':' after it: keyEnd is the offset after the
// key's closing quote, next the offset of the member's value.
func scanKey(b []byte, i int) (keyEnd, next int, esc bool, err *scanError) {
	if i >= len(b) || b[i] != '"' {
		return 0, 0, false, invalidAt(b, i, "looking for beginning of object key string")
	}
	if keyEnd, esc, err = scanString(b, i+1); err != nil {
		return 0, 0, false, err
	}
	i = skipWS(b, keyEnd)
	if i >= len(b) || b[i] != ':' {
		return 0, 0, false, invalidAt(b, i, "after object key")
	}
	return keyEnd, skipWS(b, i+1), esc, nil
}

// scanEnd checks that nothing but whitespace follows the top-level value, which the whitespace
// after it ends at i, and returns the offset of the value's last byte.
func scanEnd(b []byte, i int) (int, *scanError) {
	if i != len(b) {
		return 0, invalidAt(b, i, "after top-level value")
	}
	end := len(b)
	for end > 0 && isSpace(b[end-1]) {
		end--
	}
	return end - 1, nil
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 marks, with its high bit, each of 8 bytes (little-endian) that needs a closer look
// inside a string: a quote, a backslash, a control character or a non-ASCII byte. Bits above the
// lowest set one may be false positives (borrows), so only the lowest is used.
func special8(x uint64) uint64 {
	const quote, bslash = '"' * ones, '\\' * ones
	q, s := x^quote, x^bslash
	return (((q - ones) &^ q) | ((s - ones) &^ s) | (x - 0x20*ones) | x) & highs
}

func specialByte(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }

// scanString scans a string whose opening quote is at i-1, returning the offset after the closing
// quote and whether it holds escapes.
func scanString(b []byte, i int) (int, bool, *scanError) {
	esc := false
	for {
		// Jump to the next byte that is not plain ASCII text, 8 bytes at a time.
		for i+8 <= len(b) {
			if m := special8(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto special
			}
			i += 8
		}
		for i < len(b) && !specialByte(b[i]) {
			i++
		}
	special:
		if i >= len(b) {
			return i, esc, &scanError{len(b), "unexpected end of JSON input"}
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			i++
			if i >= len(b) {
				return i, esc, &scanError{len(b), "unexpected end of JSON input"}
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k >= len(b) {
						return i, esc, &scanError{len(b), "unexpected end of JSON input"}
					}
					if !isHex(b[i+k]) {
						return i, esc, &scanError{i + k, "invalid character " + quoteChar(b[i+k]) + " in \\u hexadecimal character escape"}
					}
				}
				i += 5
			default:
				return i, esc, &scanError{i, "invalid character " + quoteChar(b[i]) + " in string escape code"}
			}
		case c < 0x20:
			return i, esc, &scanError{i, "invalid character " + quoteChar(c) + " in string literal"}
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				return i, esc, &scanError{i, "invalid UTF-8 in string"}
			}
			i += n
		}
	}
}

func scanNumber(b []byte, i int) (int, *scanError) {
	bad := func(i int, what string) (int, *scanError) {
		if i >= len(b) {
			return i, &scanError{len(b), "unexpected end of JSON input"}
		}
		return i, &scanError{i, "invalid character " + quoteChar(b[i]) + " " + what}
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return bad(i, "in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return bad(i, "after decimal point in numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return bad(i, "in exponent of numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

func hasLit(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// litMismatch is the offset of the first byte where b[i:] stops matching lit.
func litMismatch(b []byte, i int, lit string) int {
	k := 0
	for k < len(lit) && i+k < len(b) && b[i+k] == lit[k] {
		k++
	}
	return k
}

func skipWS(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	case c < 0x20 || c >= 0x7f:
		return fmt.Sprintf("'\\x%02x'", c)
	}
	return "'" + string(c) + "'"
}
