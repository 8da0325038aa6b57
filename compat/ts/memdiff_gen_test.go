package ts_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// gen makes the random command sequence of TestMemoryMatchesTheSDKHelper.
// It reads the file store's tenant directory to aim at what exists (so
// edits, renames and deletes often hit) and to leave out the inputs where
// ctxproxy is deliberately stricter than the SDK and the SDK would change
// its tree where ctxproxy does not:
//   - old_str that spans lines or is empty, or occurs more than once on the
//     one line holding it (the SDK counts lines, so it replaces the first);
//   - a str_replace without new_str (the SDK writes "undefined");
//   - a rename whose source is missing, or whose destination is inside the
//     source, to a destination whose parent is missing (the SDK makes the
//     parent directories before it fails);
//   - a rename that would carry a path past 20 components (ctxproxy's limit);
//   - paths outside ParsePath's canonical forms (the SDK accepts
//     "/memoriesX", resolves "..", and so on) and malformed fields.
type gen struct {
	r   *rand.Rand
	dir string // the file store's directory of the tenant
}

func newGen(seed int64, dir string) *gen {
	return &gen{r: rand.New(rand.NewPCG(uint64(seed), 0x6d656d64696666)), dir: dir}
}

// names mixes orders that differ by bytes and by UTF-16 code units (é, 😀
// above U+FFFF, fullwidth Ａ and ｚ in U+FF00–U+FFEF), case, hidden names and
// node_modules, which listings leave out.
var names = []string{"a", "b", "B", "notes.md", "é.md", "😀", "Ａ", "ｚ.txt", ".h", "node_modules"}

var words = []string{"alpha", "beta", "γ", "x", "😀", "two words", "$&", "tab\there", "Ａ", "end."}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g *gen) next() []byte {
	var in map[string]any
	for in == nil {
		switch n := g.r.IntN(100); {
		case n < 4:
			in = g.malformed()
		case n < 20:
			in = g.view()
		case n < 42:
			in = map[string]any{"command": "create", "path": g.path(), "file_text": g.text()}
		case n < 60:
			in = g.strReplace()
		case n < 72:
			in = g.insert()
		case n < 82:
			in = map[string]any{"command": "delete", "path": g.path()}
		default:
			in = g.rename()
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	return b
}

// malformed is a command with a required field missing or of the wrong
// type, or an unknown command: ones on which the SDK fails in JavaScript
// without writing (not a create without file_text, an insert without
// insert_line or a str_replace without new_str: the SDK writes for those).
func (g *gen) malformed() map[string]any {
	ins := []map[string]any{
		{"command": "view"},
		{"command": "view", "path": 7},
		{"command": "delete"},
		{"command": "delete", "path": []string{g.path()}},
		{"command": "str_replace", "old_str": "x", "new_str": "y"},
		{"command": "str_replace", "path": g.path(), "new_str": "y"},
		{"command": "insert", "path": g.path(), "insert_line": 0},
		{"command": "rename", "old_path": g.path()},
		{"command": "rename", "new_path": g.path()},
		{"command": g.pick([]string{"list", "View", "move", "append"}), "path": g.path()},
	}
	return ins[g.r.IntN(len(ins))]
}

// path is an existing entry most of the time, else a new path 1–3 names
// deep, now and then the root.
func (g *gen) path() string {
	switch n := g.r.IntN(100); {
	case n < 4:
		return memoryhook.Root
	case n < 60:
		if e := g.existing(); len(e) > 0 {
			return memoryhook.Root + "/" + g.pick(e)
		}
	}
	elems := make([]string, 1+g.r.IntN(3))
	for i := range elems {
		elems[i] = g.pick(names)
	}
	return memoryhook.Root + "/" + strings.Join(elems, "/")
}

func (g *gen) text() string {
	lines := make([]string, g.r.IntN(6))
	for i := range lines {
		ws := make([]string, g.r.IntN(4))
		for j := range ws {
			ws[j] = g.pick(words)
		}
		lines[i] = strings.Join(ws, " ")
	}
	s := strings.Join(lines, "\n")
	if g.r.IntN(2) == 0 {
		s += "\n"
	}
	return s
}

func (g *gen) view() map[string]any {
	in := map[string]any{"command": "view", "path": g.path()}
	if g.r.IntN(3) == 0 {
		in["view_range"] = []int{g.r.IntN(8) - 1, g.r.IntN(10) - 2}
	}
	return in
}

func (g *gen) insert() map[string]any {
	p := g.path()
	text := g.text()
	if text == "" {
		text = g.pick(words)
	}
	n := g.r.IntN(4)
	if data, ok := g.file(p); ok {
		n = g.r.IntN(strings.Count(data, "\n")+4) - 1 // -1 … lines+1
	}
	return map[string]any{"command": "insert", "path": p, "insert_line": n, "insert_text": text}
}

func (g *gen) strReplace() map[string]any {
	p := g.path()
	old := g.pick(words)
	if data, ok := g.file(p); ok && g.r.IntN(10) < 7 {
		lines := strings.Split(data, "\n")
		old = g.substring(lines[g.r.IntN(len(lines))])
		holding, total := 0, strings.Count(data, old)
		for _, l := range lines {
			if strings.Contains(l, old) {
				holding++
			}
		}
		if old == "" || holding == 1 && total > 1 {
			old = "not in the file"
		}
	}
	return map[string]any{"command": "str_replace", "path": p, "old_str": old, "new_str": g.text()}
}

// substring is 1–6 characters of line from a random start ("" if empty).
func (g *gen) substring(line string) string {
	runes := []rune(line)
	if len(runes) == 0 {
		return ""
	}
	i := g.r.IntN(len(runes))
	return string(runes[i:min(len(runes), i+1+g.r.IntN(6))])
}

func (g *gen) rename() map[string]any {
	from, to := g.path(), g.path()
	if g.r.IntN(5) == 0 {
		to = strings.TrimSuffix(from, "/") + "/" + g.pick(names) // inside the source
	}
	in := map[string]any{"command": "rename", "old_path": from, "new_path": to}
	if from == memoryhook.Root || to == memoryhook.Root {
		return in
	}
	fromKind, toKind, parentKind := g.kind(from), g.kind(to), g.kind(path.Dir(to))
	inside := strings.HasPrefix(to, from+"/")
	if toKind == missing && parentKind == missing && (inside || fromKind != file && fromKind != dir) {
		return nil // the SDK would make to's parents, then fail
	}
	if fromKind == dir && !inside && depth(to)+g.extent(from) > memoryhook.MaxPathDepth {
		return nil
	}
	return in
}

type kind int

const (
	missing kind = iota
	file
	dir
	underFile // an ancestor is a file
)

// kind says what p is in the file store (after the same canonicalisation
// ParsePath makes: the generator makes no empty components).
func (g *gen) kind(p string) kind {
	rel := strings.TrimPrefix(strings.TrimPrefix(p, memoryhook.Root), "/")
	if rel == "" {
		return dir
	}
	elems := strings.Split(rel, "/")
	for i := range elems {
		fi, err := os.Lstat(filepath.Join(g.dir, filepath.Join(elems[:i+1]...)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return missing
		case err != nil:
			panic(err)
		case i == len(elems)-1 && fi.IsDir():
			return dir
		case i == len(elems)-1:
			return file
		case !fi.IsDir():
			return underFile
		}
	}
	return missing
}

func (g *gen) file(p string) (string, bool) {
	if g.kind(p) != file {
		return "", false
	}
	data, err := os.ReadFile(filepath.Join(g.dir, strings.TrimPrefix(p, memoryhook.Root+"/")))
	if err != nil || !utf8.Valid(data) {
		return "", false
	}
	return string(data), true
}

// existing lists the tenant's entries (relative paths), hidden ones too.
func (g *gen) existing() []string {
	var out []string
	filepath.WalkDir(g.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != g.dir && !strings.HasPrefix(d.Name(), ".tmp-") {
			rel, _ := filepath.Rel(g.dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

// extent is how many components the deepest path below directory p adds.
func (g *gen) extent(p string) int {
	top := filepath.Join(g.dir, strings.TrimPrefix(p, memoryhook.Root+"/"))
	most := 0
	filepath.WalkDir(top, func(q string, _ fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(top, q); err == nil && rel != "." {
			most = max(most, strings.Count(filepath.ToSlash(rel), "/")+1)
		}
		return nil
	})
	return most
}

func depth(p string) int { return strings.Count(strings.TrimPrefix(p, memoryhook.Root), "/") }
