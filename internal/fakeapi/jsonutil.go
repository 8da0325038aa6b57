package fakeapi

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. It escapes only what JSON
// requires (no HTML escaping), so replies stay small and readable.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// splitN splits s into at most n pieces of similar byte length, cut only at
// rune boundaries. Every piece is non-empty (fewer pieces for short s).
func splitN(s string, n int) []string {
	if n <= 1 || len(s) <= 1 {
		return []string{s}
	}
	size := (len(s) + n - 1) / n
	out := make([]string, 0, n)
	for len(s) > 0 {
		cut := size
		if cut >= len(s) {
			out = append(out, s)
			break
		}
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}
