package memoryhook

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Path limits. Names follow common file system limits (NAME_MAX); the whole
// path is kept far below PATH_MAX so a store never has to think about it.
// Depth and length are the hosted memory stores' limits (20 segments, 1,024
// bytes), and they bound every path a tenant can reach, not only the paths
// the model sends: a rename that would carry a path below it past them is
// refused (CheckMove), so no tree can grow deep enough to make a walk,
// a delete or an index entry expensive.
const (
	MaxPathBytes = 1024
	MaxNameBytes = 255
	MaxPathDepth = 20 // components below /memories
)

// Root is the only directory the memory tool may see.
const Root = "/memories"

// Path is a guarded, canonical path under /memories. Only ParsePath makes
// one; a zero Path is invalid and every store refuses it.
type Path struct {
	raw   string   // exactly as the model sent it: every message quotes this
	elems []string // components below /memories; empty for the root
	// mount is the components of the scope's mount the path was rebased
	// on (see Mount.rebase): elems are then relative to the store's root,
	// String still the model's full path. Empty without scopes.
	mount []string
	ok    bool
}

// ParsePath checks a path from the model, which must be treated as hostile
// (prompt-injected), and returns its canonical form. It touches no file system.
//
// Accepted: "/memories", or "/memories/" followed by names separated by "/".
// Empty components ("//", a trailing "/") are dropped, as the SDKs' path.join
// does; the store only ever sees the rebuilt components.
//
// ctxproxy is stricter than the SDK helpers, on purpose:
//   - they accept "/memoriesX/..." (a string prefix check); we require
//     "/memories" exactly or "/memories/" + more;
//   - "." and ".." components are refused, not resolved, as are backslashes
//     and percent escapes that decode to '.', '/', '\', '%' (double encoding)
//     or non-ASCII bytes (overlong UTF-8 such as %c0%ae): a path that needs
//     decoding is an attack, not a name;
//   - control characters, Unicode format characters (bidi overrides,
//     zero-width), line/paragraph separators and invalid UTF-8 are refused;
//   - a path over MaxPathBytes or MaxPathDepth or a name over MaxNameBytes
//     is refused.
//
// Errors are *Error values whose text goes to the model as is; sentences
// about characters never echo the offending path (it may be unprintable).
func ParsePath(raw string) (Path, error) {
	if len(raw) > MaxPathBytes {
		return Path{}, errorf("Path is %d bytes long; the limit is %d bytes.", len(raw), MaxPathBytes)
	}
	if !utf8.ValidString(raw) {
		return Path{}, errorf("Path is not valid UTF-8.")
	}
	for _, r := range raw {
		if badRune(r) {
			return Path{}, errorf("Path contains the character %U, which is not allowed in memory paths.", r)
		}
	}
	if raw != Root && !strings.HasPrefix(raw, Root+"/") {
		return Path{}, errorf("Path must start with /memories, got: %s", raw)
	}
	escape := errorf("Path %s would escape /memories directory", raw)
	if strings.ContainsRune(raw, '\\') || hasHostileEscape(raw) {
		return Path{}, escape
	}
	var elems []string
	for _, e := range strings.Split(raw[len(Root):], "/") {
		switch {
		case e == "":
			continue
		case e == "." || e == "..":
			return Path{}, escape
		case len(e) > MaxNameBytes:
			return Path{}, errorf("A name in path %s is %d bytes long; the limit is %d bytes.", raw, len(e), MaxNameBytes)
		}
		elems = append(elems, e)
	}
	if len(elems) > MaxPathDepth {
		return Path{}, errorf("Path %s has %d components below /memories; the limit is %d.", raw, len(elems), MaxPathDepth)
	}
	return Path{raw: raw, elems: elems, ok: true}, nil
}

// Extent is how far a directory's tree reaches below it: the most
// components and the most bytes any path inside it adds to the
// directory's own ("a/b.md" inside adds 2 components and 7 bytes, "/a/b.md").
type Extent struct{ Depth, Bytes int }

// Grows reports whether moving from to to can make any path longer or
// deeper; if not, a store need not measure the tree's Extent at all.
func Grows(from, to Path) bool {
	return len(to.mount)+len(to.elems) > len(from.mount)+len(from.elems) || len(to.String()) > len(from.String())
}

// CheckMove returns the error for renaming from, whose tree reaches ext
// below it, to to when a path would then be over MaxPathDepth or
// MaxPathBytes; nil when none would. Both stores call it before they
// change anything, so they refuse alike and a database never sees a key
// longer than a path may be.
func CheckMove(from, to Path, ext Extent) error {
	if n := len(to.mount) + len(to.elems) + ext.Depth; n > MaxPathDepth {
		return errorf("Cannot rename %s to %s: a path inside it would have %d components below /memories; the limit is %d.", from.Raw(), to.Raw(), n, MaxPathDepth)
	}
	if n := len(to.String()) + ext.Bytes; n > MaxPathBytes {
		return errorf("Cannot rename %s to %s: a path inside it would be %d bytes long; the limit is %d bytes.", from.Raw(), to.Raw(), n, MaxPathBytes)
	}
	return nil
}

// badRune reports characters no memory path may hold: C0/C1 controls and DEL
// (NUL included), format characters (bidi overrides and isolates, zero-width
// joiners, BOM), line and paragraph separators, and U+FFFD, which is what a
// lone surrogate escape in JSON decodes to.
func badRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) || r == utf8.RuneError
}

// hasHostileEscape reports a %XX (or IIS-style %uXXXX) escape that decodes to
// a path separator, a dot, another '%' (the start of double encoding, as in
// %252e) or a byte outside printable ASCII (overlong UTF-8 forms of '.' and
// '/'). Harmless escapes such as "%41" and a bare "50% off" stay allowed.
func hasHostileEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') && isHex(s[i+2]) && isHex(s[i+3]) && isHex(s[i+4]) && isHex(s[i+5]) {
			return true
		}
		if i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			switch b := unhex(s[i+1])<<4 | unhex(s[i+2]); {
			case b == '.', b == '/', b == '\\', b == '%', b < 0x20, b >= 0x7f:
				return true
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

// Raw is the path exactly as the model sent it; result strings quote it.
func (p Path) Raw() string { return p.raw }

// String is the canonical form: "/memories" or "/memories/a/b" (the
// model's full path, mount included, for a path rebased on a scope).
func (p Path) String() string {
	if len(p.elems)+len(p.mount) == 0 {
		return Root
	}
	if len(p.mount) > 0 {
		return Root + "/" + strings.Join(append(append([]string(nil), p.mount...), p.elems...), "/")
	}
	return Root + "/" + strings.Join(p.elems, "/")
}

// Valid reports whether p came from ParsePath.
func (p Path) Valid() bool { return p.ok }

// IsRoot reports whether p is /memories itself.
func (p Path) IsRoot() bool { return len(p.elems) == 0 }

// Elems returns the components below /memories (a copy; empty for the root).
// Each is a non-empty name without '/', '\', NUL or control characters and
// is neither "." nor "..".
func (p Path) Elems() []string { return append([]string(nil), p.elems...) }

// Rel is the slash-joined path below /memories ("" for the root), e.g. a
// key for a database row or a name for os.Root.
func (p Path) Rel() string { return strings.Join(p.elems, "/") }

// Name is the last component ("" for the root).
func (p Path) Name() string {
	if len(p.elems) == 0 {
		return ""
	}
	return p.elems[len(p.elems)-1]
}

// Parent is the containing directory; the root's parent is the root.
// Its Raw is its canonical form.
func (p Path) Parent() Path { return p.prefix(max(len(p.elems)-1, 0)) }

// prefix is the ancestor made of the first n components (raw = canonical).
func (p Path) prefix(n int) Path {
	q := Path{elems: p.elems[:n:n], mount: p.mount, ok: p.ok}
	q.raw = q.String()
	return q
}

// Ancestors lists the proper ancestors below the root, outermost first:
// /memories/a/b/c gives /memories/a and /memories/a/b.
func (p Path) Ancestors() []Path {
	var out []Path
	for n := 1; n < len(p.elems); n++ {
		out = append(out, p.prefix(n))
	}
	return out
}

// Within reports whether p is q or lies below it.
func (p Path) Within(q Path) bool {
	if len(p.elems) < len(q.elems) {
		return false
	}
	for i, e := range q.elems {
		if p.elems[i] != e {
			return false
		}
	}
	return true
}
