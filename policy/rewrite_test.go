package policy

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var update = flag.Bool("update", false, "rewrite the want sections of golden files under testdata/")

// A golden case is a text file of sections, each introduced by a line "-- name --":
//
//	policy.yaml   the tenant's policy (or "policy": a name under testdata/policies/, or a path)
//	headers       request headers, "Name: value" per line (repeat a name for repeated lines)
//	body          the request body, exactly (one trailing newline is dropped)
//	want.headers  the anthropic-beta header after the rewrite
//	want.body     the body after the rewrite (or want.error)
//	want.info     RewriteInfo
//
// Text before the first section describes the case. Run `go test ./policy -run Golden -update` to
// regenerate the want sections, then read the diff.
type golden struct {
	path     string
	preamble string
	names    []string
	sections map[string]string
}

func readGolden(t *testing.T, path string) *golden {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := &golden{path: path, sections: map[string]string{}}
	cur := ""
	var buf strings.Builder
	flush := func() {
		text := buf.String()
		if cur == "" {
			g.preamble = text
		} else {
			g.sections[cur] = strings.TrimSuffix(text, "\n")
			g.names = append(g.names, cur)
		}
		buf.Reset()
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			flush()
			cur = trimmed[3 : len(trimmed)-3]
			continue
		}
		buf.WriteString(line)
	}
	flush()
	return g
}

func (g *golden) write(t *testing.T) {
	t.Helper()
	var b strings.Builder
	b.WriteString(g.preamble)
	for _, name := range g.names {
		fmt.Fprintf(&b, "-- %s --\n%s\n", name, g.sections[name])
	}
	if err := os.WriteFile(g.path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (g *golden) set(name, value string) {
	if _, ok := g.sections[name]; !ok {
		g.names = append(g.names, name)
	}
	g.sections[name] = value
}

func (g *golden) unset(name string) {
	if _, ok := g.sections[name]; !ok {
		return
	}
	delete(g.sections, name)
	for i, n := range g.names {
		if n == name {
			g.names = append(g.names[:i], g.names[i+1:]...)
			break
		}
	}
}

func (g *golden) policy(t *testing.T) *Policy {
	t.Helper()
	if y, ok := g.sections["policy.yaml"]; ok {
		p, err := Parse("policy.yaml", []byte(y))
		if err != nil {
			t.Fatalf("policy.yaml: %v", err)
		}
		return p
	}
	name := strings.TrimSpace(g.sections["policy"])
	path := filepath.Join("testdata", "policies", name+".yaml")
	if strings.Contains(name, "/") { // a shipped policy, e.g. ../policies/default.yaml
		path = filepath.FromSlash(name)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(path, data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

func parseHeaders(s string) http.Header {
	h := http.Header{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

func formatHeaders(h http.Header) string {
	var lines []string
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func formatInfo(i RewriteInfo) string {
	s := fmt.Sprintf("edits: %s\nedits_written: %v\nmemory_added: %v\nmemory_declared: %v\nbeta_added: %v\nthinking: %v\nthread_continue: %v",
		strings.Join(i.Edits, ", "), i.EditsWritten, i.MemoryAdded, i.MemoryDeclared, i.BetaAdded, i.Thinking, i.ThreadContinue)
	if i.Compact {
		s += "\ncompact: true"
	}
	if i.OnDemand {
		s += "\non_demand: true"
	}
	return s
}

func TestRewriteGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/rewrite/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".txt")
		t.Run(name, func(t *testing.T) {
			g := readGolden(t, path)
			p := g.policy(t)
			body := []byte(g.sections["body"])
			orig := bytes.Clone(body)
			h := parseHeaders(g.sections["headers"])

			out, info, err := p.Rewrite(body, h)
			if !bytes.Equal(body, orig) {
				t.Fatal("Rewrite modified its input body")
			}
			// RewriteParts is the same body in pieces.
			parts, pinfo, perr := p.RewriteParts(body, parseHeaders(g.sections["headers"]))
			if (perr == nil) != (err == nil) || (err == nil && !bytes.Equal(bytes.Join(parts, nil), out)) || !reflect.DeepEqual(pinfo, info) {
				t.Fatalf("RewriteParts = %q, %+v, %v; Rewrite = %q, %+v, %v", bytes.Join(parts, nil), pinfo, perr, out, info, err)
			}
			var gotBody, gotErr string
			if err != nil {
				var re *RequestError
				if !errors.As(err, &re) {
					t.Fatalf("error %v is not a *RequestError", err)
				}
				gotErr = fmt.Sprintf("%d %s\n%s", re.Status, re.Type, re.Message)
				if re.Details != "" {
					gotErr += "\ndetails: " + re.Details
				}
				if !gjson.ValidBytes(re.JSON()) {
					t.Errorf("RequestError.JSON() is not valid JSON: %s", re.JSON())
				}
			} else {
				gotBody = string(out)
				if !gjson.ValidBytes(out) && gjson.ValidBytes(body) {
					t.Errorf("output is not valid JSON:\n%s", out)
				}
			}
			gotHeaders := formatHeaders(h)
			gotInfo := formatInfo(info)

			if *update {
				if err != nil {
					g.unset("want.body")
					g.unset("want.headers")
					g.unset("want.info")
					g.set("want.error", gotErr)
				} else {
					g.unset("want.error")
					g.set("want.headers", gotHeaders)
					g.set("want.body", gotBody)
					g.set("want.info", gotInfo)
				}
				g.write(t)
				return
			}
			if want, ok := g.sections["want.error"]; ok {
				if err == nil {
					t.Fatalf("want error\n%s\ngot body\n%s", want, out)
				}
				if gotErr != want {
					t.Errorf("error:\n got %s\nwant %s", gotErr, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %s", gotErr)
			}
			if want := g.sections["want.body"]; gotBody != want {
				t.Errorf("body:\n got %s\nwant %s", gotBody, want)
			}
			if want := g.sections["want.headers"]; gotHeaders != want {
				t.Errorf("headers:\n got %s\nwant %s", gotHeaders, want)
			}
			if want := g.sections["want.info"]; gotInfo != want {
				t.Errorf("info:\n got %s\nwant %s", gotInfo, want)
			}
			// Unchanged bodies are returned as they came, without a copy.
			if gotBody == string(orig) && len(out) > 0 && &out[0] != &body[0] {
				t.Errorf("body unchanged but copied")
			}
		})
	}
}

// topMembers lists a JSON object's members as key and raw value, in order.
func topMembers(b []byte) [][2]string {
	var out [][2]string
	gjson.ParseBytes(b).ForEach(func(k, v gjson.Result) bool {
		out = append(out, [2]string{k.Str, v.Raw})
		return true
	})
	return out
}

// checkUntouched asserts that every top-level member the rules do not own (all but
// context_management and tools) is in out byte for byte and in the same order as in in.
func checkUntouched(t testing.TB, in, out []byte) {
	t.Helper()
	owned := func(k string) bool { return k == "context_management" || k == "tools" }
	var a, b [][2]string
	for _, m := range topMembers(in) {
		if !owned(m[0]) {
			a = append(a, m)
		}
	}
	for _, m := range topMembers(out) {
		if !owned(m[0]) {
			b = append(b, m)
		}
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("members the rules do not own changed:\n in  %q\n out %q", a, b)
	}
	// Existing tools keep their bytes; the only change allowed is appending the memory tool.
	ti, to := gjson.GetBytes(in, "tools"), gjson.GetBytes(out, "tools")
	if ti.IsArray() {
		ei, eo := ti.Array(), to.Array()
		if len(eo) < len(ei) {
			t.Fatalf("tools lost elements: %s -> %s", ti.Raw, to.Raw)
		}
		for i := range ei {
			if ei[i].Raw != eo[i].Raw {
				t.Fatalf("tools[%d] changed: %s -> %s", i, ei[i].Raw, eo[i].Raw)
			}
		}
	}
}

func TestRewriteLeavesOtherMembersByteForByte(t *testing.T) {
	files, _ := filepath.Glob("testdata/rewrite/*.txt")
	for _, path := range files {
		g := readGolden(t, path)
		if _, isErr := g.sections["want.error"]; isErr {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			body := []byte(g.sections["body"])
			out, _, err := g.policy(t).Rewrite(body, http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			checkUntouched(t, body, out)
		})
	}
}

func TestRewriteKeepsNumberSpellingEscapesAndOrder(t *testing.T) {
	p := mustParse(t, "tenant: t\ncontext_management: {mode: enforce, clear_tool_uses: {}}\nmemory: {mode: proxy}\n")
	body := []byte(`{"b":1.0e3,"a":"caf\u00e9","tools":[{"name":"x","input_schema":{"type":"object","default":1E-7}}],"c":[0.10,-0,"\/\ud83d\ude00"]}`)
	out, _, err := p.Rewrite(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"b":1.0e3,"a":"caf\u00e9","tools":[{"name":"x","input_schema":{"type":"object","default":1E-7}},{"type":"memory_20250818","name":"memory"}],"c":[0.10,-0,"\/\ud83d\ude00"],"context_management":{"edits":[{"type":"clear_tool_uses_20250919","exclude_tools":["memory"]}]}}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func mustParse(t testing.TB, yaml string) *Policy {
	t.Helper()
	p, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRewriteInPlace(t *testing.T) {
	p := mustParse(t, "tenant: t\nmemory: {mode: inject}\n")
	body := `{"model":"m","messages":[],"tools":[{"name":"a"}]}`
	want, _, err := p.Rewrite([]byte(body), http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("with room, the result is built in the body's own array", func(t *testing.T) {
		buf := append(make([]byte, 0, len(body)+256), body...)
		out, info, err := p.RewriteInPlace(buf, http.Header{})
		if err != nil || string(out) != string(want) || !info.MemoryAdded {
			t.Fatalf("got %s, %+v, %v; want %s", out, info, err, want)
		}
		if &out[0] != &buf[0] {
			t.Fatal("a new array was allocated")
		}
	})
	t.Run("without room, a new body and the old one untouched", func(t *testing.T) {
		buf := []byte(body)
		out, _, err := p.RewriteInPlace(buf, http.Header{})
		if err != nil || string(out) != string(want) || string(buf) != body {
			t.Fatalf("got %s (body now %s), %v", out, buf, err)
		}
	})
	t.Run("a change that removes bytes is not made in place", func(t *testing.T) {
		q := mustParse(t, "tenant: t\ncontext_management: {mode: enforce}\n")
		in := `{"model":"m","messages":[],"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`
		buf := append(make([]byte, 0, len(in)+256), in...)
		want, _, _ := q.Rewrite([]byte(in), http.Header{})
		out, _, err := q.RewriteInPlace(buf, http.Header{})
		if err != nil || string(out) != string(want) || string(buf) != in {
			t.Fatalf("got %s (body now %s), %v; want %s", out, buf, err, want)
		}
	})
	t.Run("max_tokens and metadata.user_id are read in the scan", func(t *testing.T) {
		_, info, err := p.Rewrite([]byte(`{"messages":[],"metadata":{"user_id":"u-1"},"max_tokens":4096}`), nil)
		if err != nil || info.MaxTokens != 4096 || info.MetadataUserID != "u-1" {
			t.Fatalf("%+v, %v", info, err)
		}
	})
}
