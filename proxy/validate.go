package proxy

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// maxNesting bounds how deeply arrays and objects may nest in a request.
// Real requests stay far below it (tool schemas are a dozen levels); a
// body 100,000 levels deep is an attack on whatever parses it next.
const maxNesting = 512

// checkBody refuses what the JSON parsers downstream would choke on or read
// differently from ours: invalid UTF-8 and absurd nesting. It is one pass
// that skips string contents with bytes.IndexByte, so it costs little on the
// long strings (tool results) that make bodies big. Syntax itself is checked
// by the rewriter.
func checkBody(b []byte) error {
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return fmt.Errorf("request body is not valid UTF-8 (byte offset %d)", off)
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Jump to the closing quote: the next quote not escaped by an odd
			// run of backslashes.
			for {
				j := bytes.IndexByte(b[i+1:], '"')
				if j < 0 {
					return nil // unterminated: the syntax check reports it
				}
				i += j + 1
				bs := 0
				for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
					bs++
				}
				if bs%2 == 0 {
					break
				}
			}
		case '[', '{':
			depth++
			if depth > maxNesting {
				return fmt.Errorf("request body nests arrays and objects more than %d levels deep (byte offset %d)", maxNesting, i)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}
