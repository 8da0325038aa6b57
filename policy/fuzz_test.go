package policy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// fuzzPolicies covers every mode combination the rewriter branches on.
var fuzzPolicies = func() []*Policy {
	var out []*Policy
	for _, cm := range []string{"enforce", "default", "off"} {
		for _, mem := range []string{"proxy", "inject", "off"} {
			y := "tenant: f\ncontext_management:\n  mode: " + cm +
				"\n  clear_thinking: {keep: all}\n  clear_tool_uses: {trigger: {type: input_tokens, value: 100}, exclude_tools: [x]}\nmemory: {mode: " + mem + "}\n"
			p, err := Parse("fuzz.yaml", []byte(y))
			if err != nil {
				panic(err)
			}
			out = append(out, p)
		}
	}
	none, err := Parse("fuzz.yaml", []byte("tenant: f\ncontext_management: {mode: enforce}\nmemory: {mode: proxy}\n"))
	if err != nil {
		panic(err)
	}
	return append(out, none)
}()

// FuzzRewrite: Rewrite never panics; whenever the input was a valid JSON object and Rewrite accepts
// it, the output is valid JSON, the members the rules do not own are unchanged, and a second
// rewrite changes nothing more.
func FuzzRewrite(f *testing.F) {
	files, _ := filepath.Glob("testdata/rewrite/*.txt")
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(data), "-- body --\n")
		if !ok {
			continue
		}
		body, _, _ := strings.Cut(rest, "\n-- ")
		f.Add([]byte(body), uint8(len(body)))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		p := fuzzPolicies[int(which)%len(fuzzPolicies)]
		in := append([]byte(nil), body...)
		out, info, err := p.Rewrite(body, http.Header{})
		if string(body) != string(in) {
			t.Fatal("Rewrite modified its input")
		}
		if parts, _, perr := p.RewriteParts(body, http.Header{}); (perr == nil) != (err == nil) || (err == nil && !bytes.Equal(bytes.Join(parts, nil), out)) {
			t.Fatalf("RewriteParts and Rewrite differ: %q vs %q (%v, %v)", bytes.Join(parts, nil), out, perr, err)
		}
		// RewriteInPlace gives the same result in a buffer with room to spare.
		room := make([]byte, len(body), len(body)+int(which&0x3f)*8)
		copy(room, body)
		if inPlace, _, ierr := p.RewriteInPlace(room, http.Header{}); (ierr == nil) != (err == nil) || (err == nil && !bytes.Equal(inPlace, out)) {
			t.Fatalf("RewriteInPlace and Rewrite differ: %q vs %q (%v, %v)", inPlace, out, ierr, err)
		}
		if err != nil {
			if _, ok := err.(*RequestError); !ok {
				t.Fatalf("error %T is not a *RequestError", err)
			}
			return
		}
		if !gjson.ValidBytes(body) || !utf8.Valid(body) {
			// Only the contents of a bulk member may be left to the API.
			if !invalidOnlyInBulk(body) {
				t.Fatalf("accepted invalid JSON %q", body)
			}
			return
		}
		if !gjson.ValidBytes(out) || !json.Valid(out) {
			t.Fatalf("valid input %q gave invalid output %q", body, out)
		}
		checkUntouched(t, body, out)
		// Only a default-mode request whose own edits were all dropped may change again: on the second
		// pass it has no edits, so it gets the tenant's.
		if p.ContextManagement.Mode == CMDefault && info.EditsWritten && len(info.Edits) == 0 {
			return
		}
		again, _, err := p.Rewrite(out, http.Header{})
		if err != nil {
			t.Fatalf("rewritten body %q refused: %v", out, err)
		}
		if string(again) != string(out) {
			t.Fatalf("second rewrite changed the body:\n in    %q\n once  %q\n twice %q", body, out, again)
		}
	})
}

// invalidOnlyInBulk reports whether the first error a full scan finds in body lies inside the value
// of a bulk member (messages, system, tools), as the skimming scan delimits them.
func invalidOnlyInBulk(body []byte) bool {
	_, _, _, err := scanBody(body, nil, scanAll, span{})
	if err == nil {
		return true
	}
	members, _, _, serr := scanBody(body, nil, scanSkimBulk, span{})
	if serr != nil {
		return false
	}
	for _, m := range members {
		if !m.keyEsc && bulkKey(string(body[m.keyStart+1:m.keyEnd-1])) && m.valStart <= err.off && err.off < m.valEnd {
			return true
		}
	}
	return false
}
