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
// differently from ours: invalid UTF-8, absurd nesting, and a top-level key
// given twice (the proxy reads the first "model" or "stream", the API may
// read the last: a way around accounting and policy). It is one pass
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
	expectKey := false
	var keys [16][]byte // top-level keys seen; requests have about ten
	seen := keys[:0]
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			start := i
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
			if depth == 1 && expectKey {
				expectKey = false
				key := b[start : i+1]
				for _, k := range seen {
					if bytes.Equal(k, key) {
						return fmt.Errorf("request body has the key %s more than once", key)
					}
				}
				seen = append(seen, key)
			}
		case ',':
			expectKey = depth == 1
		case '[', '{':
			expectKey = depth == 0 && b[i] == '{'
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
