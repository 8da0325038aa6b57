package memapi

import "strings"

// maxDiffCells bounds the diff table (lines × lines); past it the diff is
// the whole old text removed and the new one added.
const maxDiffCells = 4 << 20

// Diff is a line diff of a to b: each line prefixed "  " (kept), "- "
// (only in a) or "+ " (only in b).
func Diff(a, b string) string {
	x, y := lines(a), lines(b)
	var out strings.Builder
	emit := func(prefix, line string) {
		out.WriteString(prefix)
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if len(x)*len(y) > maxDiffCells {
		for _, l := range x {
			emit("- ", l)
		}
		for _, l := range y {
			emit("+ ", l)
		}
		return out.String()
	}
	// lcs[i][j]: longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			emit("  ", x[i])
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			emit("- ", x[i])
			i++
		default:
			emit("+ ", y[j])
			j++
		}
	}
	return out.String()
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
