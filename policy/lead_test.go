package policy

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// leadAll feeds body to l in pieces of the given sizes (cycled) and returns what it handed out.
func leadAll(t testing.TB, l *Lead, body []byte, sizes []int) []byte {
	t.Helper()
	var sent []byte
	for n, k := 0, 0; n < len(body); k++ {
		n = min(len(body), n+max(1, sizes[k%len(sizes)]))
		for _, piece := range l.Advance(body[:n]) {
			sent = append(sent, piece...)
		}
		if l.sent > n {
			t.Fatalf("after %d bytes the Lead sent %d", n, l.sent)
		}
	}
	return sent
}

func TestLeadAdvance(t *testing.T) {
	if !LeadWorks {
		t.Skip("no vector skim on this CPU: a Lead never runs ahead")
	}
	msgs := `[{"role":"user","content":"a \"[quoted]\" {brace} \\"}]`
	tests := []struct {
		name string
		body string
		safe string // what the Lead hands out, up to the last whole block of messages it has seen
	}{
		{"messages first: everything up to its end goes ahead", `{"messages":` + msgs + `,"tools":[]}`, `{"messages":` + msgs},
		{"scalars before messages go ahead with it", `{"max_tokens":10, "model" : "m","messages":` + msgs + `}`, `{"max_tokens":10, "model" : "m","messages":` + msgs},
		{"a system with brackets in its strings before messages", `{"system":[{"type":"text","text":"]}"}],"messages":` + msgs + `}`, `{"system":[{"type":"text","text":"]}"}],"messages":` + msgs},
		{"tools before messages goes ahead with the memory tool added", `{"tools":[{"name":"x"}],"messages":` + msgs + `}`, `{"tools":[{"name":"x"},{"type":"memory_20250818","name":"memory"}],"messages":` + msgs},
		{"tools that declare memory go ahead as they are", `{"tools":[{"type":"memory_20250818","name":"memory"}],"messages":` + msgs + `}`, `{"tools":[{"type":"memory_20250818","name":"memory"}],"messages":` + msgs},
		{"a tools conflicting with the memory tool: nothing goes ahead", `{"tools":[{"name":"memory"}],"messages":` + msgs + `}`, ``},
		{"tools null before messages: nothing goes ahead", `{"tools":null,"messages":` + msgs + `}`, ``},
		{"context_management before messages: nothing goes ahead", `{"context_management":{},"messages":` + msgs + `}`, ``},
		{"an escaped key before messages may spell tools: nothing goes ahead", `{"\u0074ools":[],"messages":` + msgs + `}`, ``},
		{"messages not an array: nothing goes ahead", `{"messages":{},"model":"m"}`, ``},
		{"no messages: nothing goes ahead", `{"model":"m","max_tokens":1}`, ``},
		{"not an object: nothing goes ahead", `[1,2]`, ``},
		{"broken before messages: nothing goes ahead", `{"model" "m","messages":[]}`, ``},
	}
	p := mustParse(t, "tenant: t\ncontext_management: {mode: enforce}\nmemory: {mode: inject}\n")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, sizes := range [][]int{{1}, {7, 64}, {1 << 20}} {
				body := []byte(tc.body)
				l := p.NewLead(nil)
				got := leadAll(t, l, body, sizes)
				// Until the body is whole the Lead holds back a last partial block of messages;
				// it reads the members before messages again only once the prefix has doubled.
				if !strings.HasPrefix(tc.safe, string(got)) || sizes[0] == 1<<20 && len(tc.safe)-len(got) >= 64 {
					t.Fatalf("pieces %v: handed out %q, want %q or all but its last partial block", sizes, got, tc.safe)
				}
				if tc.safe == "" && len(got) > 0 {
					t.Fatalf("pieces %v: handed out %q, want nothing", sizes, got)
				}
			}
		})
	}
}

// TestLeadTrickleReadsHeadLogTimes: a body arriving a byte at a time whose messages has not
// begun yet is not read from the start once per byte (a square of its length).
func TestLeadTrickleReadsHeadLogTimes(t *testing.T) {
	if !LeadWorks {
		t.Skip("no vector skim on this CPU: a Lead never reads the head")
	}
	body := []byte(`{"system":"` + strings.Repeat("a", 100000) + `","messages":[]}`)
	l := mustParse(t, "tenant: t\nmemory: {mode: inject}\n").NewLead(nil)
	leadAll(t, l, body, []int{1})
	if l.heads > 20 {
		t.Fatalf("the head was read %d times for %d bytes", l.heads, len(body))
	}
}

// TestLeadAheadOfLongMessages: on a long transcript the Lead lets bytes go while messages is still
// arriving, not only once it has ended.
func TestLeadAheadOfLongMessages(t *testing.T) {
	if !LeadWorks {
		t.Skip("no vector skim on this CPU")
	}
	body := transcript(200)
	p := mustParse(t, "tenant: t\ncontext_management: {mode: enforce}\nmemory: {mode: inject}\n")
	l := p.NewLead(nil)
	half := leadAll(t, l, body[:len(body)/2], []int{1 << 20})
	if len(half) < len(body)/2-64 {
		t.Fatalf("half the body in, %d of %d bytes handed out", len(half), len(body)/2)
	}
}

// leadBodies are bodies the Lead and the rewrite must agree on: the rewrite golden files' and
// generated ones in each member order.
func leadBodies(t testing.TB) [][]byte {
	var out [][]byte
	files, _ := filepath.Glob("testdata/rewrite/*.txt")
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, ok := strings.Cut(string(data), "-- body --\n"); ok {
			body, _, _ := strings.Cut(rest, "\n-- ")
			out = append(out, []byte(body))
		}
	}
	msgs := `"messages":[{"role":"user","content":[{"type":"text","text":"x\\\"]}"}]},{"role":"assistant","content":"y"}]`
	for _, parts := range [][]string{
		{msgs, `"model":"claude-sonnet-4-5"`, `"tools":[{"name":"t","input_schema":{}}]`},
		{`"max_tokens":5`, msgs, `"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}`},
		{`"model":"m"`, msgs, `"thinking":{"type":"enabled","budget_tokens":1024}`, `"tools":null`},
		{msgs, `"context_management":null`},
		{msgs},
		{`"tools":[]`, msgs},
		{msgs, `"messages":[]`},
		{msgs, `"compaction":{}`},
	} {
		out = append(out, []byte("{"+strings.Join(parts, ",")+"}"), []byte("{ "+strings.Join(parts, " ,\n ")+" }\n"))
	}
	return append(out, transcript(40))
}

// TestRewriteLeadMatchesRewriteParts: for every policy, body and way the body arrives, RewriteLead
// makes the body, headers and info RewriteParts makes, and every byte the Lead said was safe is
// one the rewrite kept.
func TestRewriteLeadMatchesRewriteParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pols := append(fuzzPolicies, nil)
	for _, body := range leadBodies(t) {
		for _, p := range pols {
			sizes := []int{1 + rng.IntN(200), 1 + rng.IntN(5000)}
			checkLead(t, p, body, sizes)
		}
	}
}

func checkLead(t *testing.T, p *Policy, body []byte, sizes []int) {
	t.Helper()
	h1, h2 := http.Header{"Anthropic-Beta": {"x"}}, http.Header{"Anthropic-Beta": {"x"}}
	l := p.NewLead(h2)
	sent := leadAll(t, l, body, sizes)
	want, winfo, werr := p.RewriteParts(body, h1)
	got, rest, ginfo, gerr := p.RewriteLead(body, h2, l)
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("body %q: RewriteLead error %v, RewriteParts %v", body, gerr, werr)
	}
	if werr != nil {
		return
	}
	g, w := bytes.Join(got, nil), bytes.Join(want, nil)
	if !bytes.Equal(g, w) || !reflect.DeepEqual(ginfo, winfo) || !reflect.DeepEqual(h1, h2) {
		t.Fatalf("body %q:\nRewriteLead  %q %+v %v\nRewriteParts %q %+v %v", body, g, ginfo, h2, w, winfo, h1)
	}
	if rest == nil {
		t.Fatalf("body %q: the rewrite accepted it but not what the Lead sent, %q", body, sent)
	}
	if whole := append(sent, bytes.Join(rest, nil)...); !bytes.Equal(whole, w) {
		t.Fatalf("body %q: the Lead sent %q then the rest %q; the rewrite makes %q", body, sent, bytes.Join(rest, nil), w)
	}
	spec := http.Header{"Anthropic-Beta": {"x"}}
	ginfo.Betas().Merge(spec)
	if !reflect.DeepEqual(spec, h2) {
		t.Fatalf("body %q: Betas().Merge made %v, the rewrite %v", body, spec, h2)
	}
}

// FuzzLead: whatever the body and however it arrives, RewriteLead agrees with RewriteParts and the
// Lead never calls safe a byte the rewrite changes.
func FuzzLead(f *testing.F) {
	for _, b := range leadBodies(f) {
		f.Add(b, uint8(0), uint16(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8, piece uint16) {
		p := fuzzPolicies[int(which)%len(fuzzPolicies)]
		checkLead(t, p, body, []int{int(piece%4096) + 1, int(piece>>12) + 1})
	})
}
