package fakeapi

import "unicode/utf8"

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
