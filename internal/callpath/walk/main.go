// Command walk shows the path one streamed Messages request with one memory
// call takes through ctxproxy: every function it enters, in order, and the
// calls that go back into a file already left. Run from the module's root:
//
//	go run ./internal/callpath/walk
//
// It builds proxy's TestCallPath with every function of the module's
// packages (not the fake upstream's) first calling callpath.Enter, through
// a go build overlay in a temporary folder (the source tree is not
// touched), and runs it.
package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

const pkgPath = "github.com/ctxproxy/ctxproxy/internal/callpath"

// skip are the folders whose code is not on the request path, or must not
// call Enter (callpath itself).
var skip = map[string]bool{"internal/callpath": true, "internal/fakeapi": true, "cmd": true, "compat": true,
	"bench": true, "deploy": true, "testdata": true, "node_modules": true, "vendor": true, ".git": true}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "walk:", err)
		os.Exit(1)
	}
}

func run() error {
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run from the module's root: %w", err)
	}
	tmp, err := os.MkdirTemp("", "callpath")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	replace := map[string]string{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[filepath.ToSlash(path)] || skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		out, ok, err := instrument(path)
		if err != nil || !ok {
			return err
		}
		abs, _ := filepath.Abs(path)
		dst := filepath.Join(tmp, strings.ReplaceAll(filepath.ToSlash(path), "/", "_"))
		replace[abs] = dst
		return os.WriteFile(dst, out, 0o644)
	})
	if err != nil {
		return err
	}
	// The recorder says it is live in this build.
	abs, _ := filepath.Abs("internal/callpath/zz_instrumented.go")
	replace[abs] = filepath.Join(tmp, "zz_instrumented.go")
	if err := os.WriteFile(replace[abs], []byte("package callpath\n\nfunc init() { Instrumented = true }\n"), 0o644); err != nil {
		return err
	}
	overlay := filepath.Join(tmp, "overlay.json")
	b, _ := json.Marshal(map[string]any{"Replace": replace})
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		return err
	}
	cmd := exec.Command("go", "test", "-overlay", overlay, "-count=1", "-run", "^TestCallPath$", "-v", "./proxy/")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// instrument puts `defer callpath.Enter(file, name)()` first in every
// function of the file, on the line of its opening brace, and the import
// on the package clause's line, so every line keeps its number. ok is
// false for a file without functions.
func instrument(path string) ([]byte, bool, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, false, err
	}
	type ins struct {
		at   int
		text string
	}
	var edits []ins
	file := filepath.ToSlash(path)
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		edits = append(edits, ins{fset.Position(fd.Body.Lbrace).Offset + 1,
			" defer callpath__.Enter(" + strconv.Quote(file) + ", " + strconv.Quote(funcName(fd)) + ")();"})
	}
	if len(edits) == 0 {
		return nil, false, nil
	}
	edits = append([]ins{{fset.Position(f.Name.End()).Offset, "; import callpath__ " + strconv.Quote(pkgPath)}}, edits...)
	var out []byte
	last := 0
	for _, e := range edits {
		out = append(out, src[last:e.at]...)
		out = append(out, e.text...)
		last = e.at
	}
	return append(out, src[last:]...), true, nil
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
