package memoryhook

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The pure half of every command: result strings and edits. Stores only
// move bytes; everything the model reads is built here, so two stores over
// the same content answer character for character the same.

// DirSize is the size a store without real directories reports for one:
// what ext4 reports for a small directory, so its listings print "4K" like
// the file store's. (The file store prints the real st_size.)
const DirSize = 4096

// lineNumberWidth is len("999999"), the SDKs' LINE_NUMBER_WIDTH.
const lineNumberWidth = 6

// FormatSize renders a size as the SDKs do: "0B", "512B", "4K", "1.5K",
// "1024.0K": the largest of B, K, M, G (1024 steps) not above the size, no
// decimals when whole, else one decimal rounded half up (JS toFixed).
func FormatSize(n int64) string {
	if n <= 0 {
		return "0B"
	}
	units := [...]string{"B", "K", "M", "G"}
	i, d := 0, int64(1)
	for i < len(units)-1 && n >= d*1024 {
		i, d = i+1, d*1024
	}
	if n%d == 0 {
		return strconv.FormatInt(n/d, 10) + units[i]
	}
	tenths := (20*n + d) / (2 * d) // round(10n/d) with halves up
	return strconv.FormatInt(tenths/10, 10) + "." + strconv.FormatInt(tenths%10, 10) + units[i]
}

func numbered(n int, line string) string {
	return fmt.Sprintf("%*d\t%s", lineNumberWidth, n, line)
}

func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) + 1 }

// FormatFile renders a file view: the header, then each line of content
// (split on "\n") numbered, limited to viewRange ([start, end], 1-based,
// end -1 = to the end; nil = all) and cut at maxChars with a note.
// The range follows the SDKs' slice semantics: start below 1 counts as 1,
// ends past the file are clamped and an empty selection shows no lines.
func FormatFile(p Path, content []byte, viewRange []int, maxChars int) (string, error) {
	if n := countLines(content); n > MaxLines {
		return "", errorf("File %s has too many lines (%d). Maximum is 999,999 lines.", p.Raw(), n)
	}
	lines := strings.Split(string(content), "\n")
	from, to := 0, len(lines)
	if len(viewRange) == 2 {
		from = min(max(1, viewRange[0])-1, len(lines))
		switch end := viewRange[1]; {
		case end == -1:
			to = len(lines)
		case end < 0:
			to = max(len(lines)+end, 0)
		default:
			to = min(end, len(lines))
		}
		to = max(to, from)
	}
	var b strings.Builder
	b.WriteString("Here's the content of " + p.Raw() + " with line numbers:\n")
	budget := maxChars - utf8.RuneCountInString(b.String())
	for i := from; i < to; i++ {
		piece := numbered(i+1, lines[i])
		if i > from {
			piece = "\n" + piece
		}
		n := utf8.RuneCountInString(piece)
		if n <= budget {
			b.WriteString(piece)
			budget -= n
			continue
		}
		if i == from { // not even one line fits: show what does, so a long line can still be read
			b.WriteString(cutRunes(piece, max(budget, 0)))
			fmt.Fprintf(&b, "\n[Output cut at %d characters inside line %d of %d, which is longer than one view.]", maxChars, i+1, len(lines))
		} else {
			fmt.Fprintf(&b, "\n[Output cut at %d characters: lines %d-%d of %d shown. Use view_range to see the rest.]", maxChars, from+1, i, len(lines))
		}
		break
	}
	return b.String(), nil
}

func cutRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// Entry is one file or directory as a Backend lists it.
type Entry struct {
	Rel  string // slash-separated path below the listed directory
	Dir  bool
	Size int64 // a file's bytes; a directory's own size (DirSize when the store has no real one)
}

// hiddenRel reports entries the listing leaves out: any component starting
// with "." or named node_modules (the TS SDK and the docs; Python lists
// node_modules).
func hiddenRel(rel string) bool {
	for _, e := range strings.Split(rel, "/") {
		if e == "" || strings.HasPrefix(e, ".") || e == "node_modules" {
			return true
		}
	}
	return false
}

// FormatListing renders a directory view of p: the header, the directory's
// own line, then its entries up to 2 levels deep, hidden ones and
// node_modules left out, sorted by name at each level with parents before
// children (compareRel: the TS SDK's order), directories with a trailing
// "/", cut at maxChars with a note.
//
// Entries are printed as "{path}/{rel}" with {path} the raw path less any
// trailing slashes, so "/memories/" lists "/memories/a", not "/memories//a".
func FormatListing(p Path, dirSize int64, entries []Entry, maxChars int) string {
	shown := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if !hiddenRel(e.Rel) && strings.Count(e.Rel, "/") < 2 {
			shown = append(shown, e)
		}
	}
	slices.SortFunc(shown, func(a, b Entry) int { return compareRel(a.Rel, b.Rel) })
	var b strings.Builder
	b.WriteString("Here're the files and directories up to 2 levels deep in " + p.Raw() + ", excluding hidden items and node_modules:\n")
	b.WriteString(FormatSize(dirSize) + "\t" + p.Raw())
	budget := maxChars - utf8.RuneCountInString(b.String())
	prefix := strings.TrimRight(p.Raw(), "/")
	for i, e := range shown {
		line := "\n" + FormatSize(e.Size) + "\t" + prefix + "/" + e.Rel
		if e.Dir {
			line += "/"
		}
		n := utf8.RuneCountInString(line)
		if n > budget {
			fmt.Fprintf(&b, "\n[Output cut at %d characters: %d of %d entries shown. View a subdirectory to see more.]", maxChars, i, len(shown))
			break
		}
		b.WriteString(line)
		budget -= n
	}
	return b.String()
}

// ReplaceOnce is str_replace over the whole file: old must occur exactly
// once (occurrences counted across lines, not per line as the TS SDK does,
// so an old_str spanning lines can match, and two on one line are two). A
// refusal for several lists each line holding one once, as the SDK does.
// It returns the new content and the result text with the SDK's snippet:
// 2 lines either side of the line the match starts on, however many lines
// new_str spans.
func ReplaceOnce(p Path, content []byte, oldStr, newStr string) ([]byte, string, error) {
	if oldStr == "" {
		return nil, "", errorf("No replacement was performed: old_str must not be empty.")
	}
	s := string(content)
	switch strings.Count(s, oldStr) {
	case 0:
		return nil, "", errorf("No replacement was performed, old_str `%s` did not appear verbatim in %s.", oldStr, p.Raw())
	case 1:
	default:
		var lines []string
		line, last := 1, 0
		for at := 0; ; at += len(oldStr) {
			i := strings.Index(s[at:], oldStr)
			if i < 0 {
				break
			}
			at += i
			n := line
			line += strings.Count(s[last:at], "\n")
			last = at
			if line != n || len(lines) == 0 {
				lines = append(lines, strconv.Itoa(line))
			}
		}
		return nil, "", errorf("No replacement was performed. Multiple occurrences of old_str `%s` in lines: %s. Please ensure it is unique", oldStr, strings.Join(lines, ", "))
	}
	at := strings.Index(s, oldStr)
	out := s[:at] + newStr + s[at+len(oldStr):]
	changed := strings.Count(s[:at], "\n")
	lines := strings.Split(out, "\n")
	from := max(0, changed-2)
	to := min(len(lines), changed+3)
	var b strings.Builder
	b.WriteString("The memory file has been edited. Here is the snippet showing the change (with line numbers):")
	for i := from; i < to; i++ {
		b.WriteString("\n" + numbered(i+1, lines[i]))
	}
	return []byte(out), b.String(), nil
}

// InsertAt inserts text after line n of content (0 = before the first);
// one trailing "\n" of text is dropped, so text becomes line n+1.
func InsertAt(p Path, content []byte, n int, text string) ([]byte, error) {
	count := countLines(content)
	if n < 0 || n > count {
		return nil, errorf("Invalid `insert_line` parameter: %d. It should be within the range of lines of the file: [0, %d]", n, count)
	}
	text = strings.TrimSuffix(text, "\n")
	out := make([]byte, 0, len(content)+len(text)+1)
	if n == count { // after the last line
		return append(append(append(out, content...), '\n'), text...), nil
	}
	off := 0 // start of line n+1 (1-based)
	for range n {
		off += bytes.IndexByte(content[off:], '\n') + 1
	}
	out = append(append(append(out, content[:off]...), text...), '\n')
	return append(out, content[off:]...), nil
}

// compareRel orders two listing entries as the TS SDK's listing does: name
// by name from the top (a directory's entries follow it), each level sorted
// by JavaScript's default sort, which compares UTF-16 code units.
func compareRel(a, b string) int {
	for {
		ea, ra, _ := strings.Cut(a, "/")
		eb, rb, _ := strings.Cut(b, "/")
		if c := compareUTF16(ea, eb); c != 0 {
			return c
		}
		switch {
		case ra == "" && rb == "":
			return 0
		case ra == "":
			return -1
		case rb == "":
			return 1
		}
		a, b = ra, rb
	}
}

// compareUTF16 compares two names by their UTF-16 code units without
// converting them. It differs from byte (code point) order only for
// characters U+E000–U+FFFF, which UTF-16 puts after every character above
// U+FFFF (those start with a surrogate, D800–DFFF): "Ａ" (U+FF21) sorts
// after "😀" (U+1F600) in the SDK, before it in bytes.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return cmp.Compare(utf16Key(ra), utf16Key(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// utf16Key maps a rune to a number ordered as its first UTF-16 code unit
// (and, for runes above U+FFFF, as its pair).
func utf16Key(r rune) int {
	if r >= 0xE000 && r <= 0xFFFF {
		return int(r) + 0x110000
	}
	return int(r)
}

// bound cuts a tool_result longer than maxChars characters to maxChars and
// says so, so that no result (an error quoting a long old_str, a listing of
// every matching line, a snippet of a long line) can push the next request
// past the API's size limits.
func bound(s string, maxChars int) string {
	if len(s) <= maxChars { // bytes ≥ characters
		return s
	}
	n := utf8.RuneCountInString(s)
	if n <= maxChars {
		return s
	}
	return cutRunes(s, maxChars) + fmt.Sprintf("\n[Output cut at %d of %d characters.]", maxChars, n)
}
