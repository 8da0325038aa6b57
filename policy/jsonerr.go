package policy

// requestError is the 400 for a body that is not valid JSON, saying where.
func (e *scanError) requestError(body []byte) *RequestError {
	line, col := lineCol(body, e.off)
	return badRequest("malformed JSON at line %d, column %d (byte offset %d): %s", line, col, e.off, e.msg)
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
