package policy

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// syntaxError says where a body that gjson found invalid goes wrong. encoding/json is used only
// here, on the error path, because gjson does not report positions.
func syntaxError(body []byte) *RequestError {
	err := json.Unmarshal(body, new(json.RawMessage))
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the bytes read, the bad one included; at the end of input it is the length.
		pos := int(se.Offset) - 1
		if strings.Contains(se.Error(), "unexpected end") {
			pos = len(body)
		}
		pos = min(max(pos, 0), len(body))
		line, col := lineCol(body, pos)
		return badRequest("malformed JSON at line %d, column %d (byte offset %d): %s", line, col, pos, se.Error())
	}
	if err != nil {
		return badRequest("malformed JSON: %v", err)
	}
	if !utf8.Valid(body) {
		off := invalidUTF8(body)
		line, col := lineCol(body, off)
		return badRequest("malformed JSON at line %d, column %d (byte offset %d): invalid UTF-8", line, col, off)
	}
	return badRequest("malformed JSON in request body")
}

// lineCol is the 1-based line and column of byte offset off.
func lineCol(b []byte, off int) (line, col int) {
	line, col = 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	js, err := json.Marshal(s)
	if err != nil {
		return strconv.AppendQuote(b, s)
	}
	return append(b, js...)
}
