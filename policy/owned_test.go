package policy

import (
	"net/http"
	"reflect"
	"testing"
	"unsafe"
)

// poison overwrites all of b's array, as the proxy does to a body buffer
// it gives back to its pool.
func poison(b []byte) {
	b = b[:cap(b)]
	for i := range b {
		b[i] = '#'
	}
}

// RewriteInfo outlives the body (the ledger, spans, logs and spend counters
// keep its strings): whatever happens to the body's bytes afterwards, in
// place or in a pool, the info stays what the body said.
func TestRewriteInfoOwnsItsStrings(t *testing.T) {
	const body = `{"tools":[{"name":"a"}],"model":"claude-opus-4-1","max_tokens":5,` +
		`"metadata":{"user_id":"user-7"},"messages":[{"role":"user","content":"hi"}],` +
		`"context_management":{"edits":[{"type":"clear_thinking_20251015"},{"type":"edit_from_the_future_1"},{"type":"clear_tool_uses_20250919"}]}}`
	pols := map[string]*Policy{
		"no policy": nil,
		"enforce":   mustParse(t, "tenant: t\ncontext_management: {mode: enforce}\nmemory: {mode: inject}\n"),
		"default":   mustParse(t, "tenant: t\ncontext_management: {mode: default}\nmemory: {mode: inject}\n"),
		"off":       mustParse(t, "tenant: t\ncontext_management: {mode: off}\n"),
	}
	entries := map[string]func(p *Policy, b []byte) (RewriteInfo, error){
		"Rewrite": func(p *Policy, b []byte) (RewriteInfo, error) {
			_, info, err := p.Rewrite(b, http.Header{})
			return info, err
		},
		"RewriteParts": func(p *Policy, b []byte) (RewriteInfo, error) {
			_, info, err := p.RewriteParts(b, http.Header{})
			return info, err
		},
		// With room the memory tool goes into the tools array in place,
		// moving every byte after it, the model's among them.
		"RewriteInPlace": func(p *Policy, b []byte) (RewriteInfo, error) {
			_, info, err := p.RewriteInPlace(b, http.Header{})
			return info, err
		},
		"RewriteLead": func(p *Policy, b []byte) (RewriteInfo, error) {
			l := p.NewLead(http.Header{})
			l.Advance(b)
			_, _, info, err := p.RewriteLead(b, http.Header{}, l)
			return info, err
		},
	}
	for pname, p := range pols {
		for ename, rewrite := range entries {
			t.Run(ename+" with "+pname, func(t *testing.T) {
				want, err := rewrite(p, []byte(body))
				if err != nil {
					t.Fatal(err)
				}
				if want.Model != "claude-opus-4-1" || want.MetadataUserID != "user-7" {
					t.Fatalf("read model %q, user %q", want.Model, want.MetadataUserID)
				}
				buf := append(make([]byte, 0, len(body)+512), body...)
				got, err := rewrite(p, buf)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("the info is\n%+v\nwant\n%+v", got, want)
				}
				poison(buf)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("after the body's buffer was overwritten the info is\n%+v\nwant\n%+v", got, want)
				}
			})
		}
	}
}

// An in-place rewrite that adds the memory tool to a tools array ahead of
// the model moves the model's bytes within the body: the model read before
// is still the model.
func TestRewriteInPlaceKeepsTheModelItMoved(t *testing.T) {
	p := mustParse(t, "tenant: t\nmemory: {mode: inject}\n")
	body := `{"tools":[{"name":"a"}],"model":"claude-opus-4-1","messages":[]}`
	buf := append(make([]byte, 0, len(body)+256), body...)
	out, info, err := p.RewriteInPlace(buf, http.Header{})
	if err != nil || &out[0] != &buf[0] {
		t.Fatalf("not rewritten in place: %v", err)
	}
	if info.Model != "claude-opus-4-1" {
		t.Fatalf("model %q after the rewrite moved it", info.Model)
	}
}

// A known edit type is the package's constant (no copy on the common
// path); any other is copied out of the body.
func TestOwnedEditType(t *testing.T) {
	view := func(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
	for _, typ := range []string{EditClearThinking, EditClearToolUses, EditCompact} {
		if got := ownedEditType(view([]byte(typ))); unsafe.StringData(got) != unsafe.StringData(typ) {
			t.Errorf("%s: not the constant", typ)
		}
	}
	b := []byte("edit_from_the_future_1")
	got := ownedEditType(view(b))
	poison(b)
	if got != "edit_from_the_future_1" {
		t.Errorf("an unknown type is %q after the body changed", got)
	}
}
