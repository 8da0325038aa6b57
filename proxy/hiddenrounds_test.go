package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// countingStore is the file store, counting the continuation reads the proxy makes.
type countingStore struct {
	*memoryhook.FileStore
	one, batches, keys atomic.Int64
}

func (s *countingStore) GetContinuation(ctx context.Context, tenant, replyID string) ([]byte, error) {
	s.one.Add(1)
	return s.FileStore.GetContinuation(ctx, tenant, replyID)
}

func (s *countingStore) GetContinuations(ctx context.Context, tenant string, replyIDs []string) ([][]byte, error) {
	s.batches.Add(1)
	s.keys.Add(int64(len(replyIDs)))
	return s.FileStore.GetContinuations(ctx, tenant, replyIDs)
}

// A conversation carrying back several merged messages of memory loops whose later rounds
// thought: the proxy looks up what they hid in one read of the store per request, however many
// such messages the transcript holds (each a PostgreSQL round trip with that store), and gives
// the API every hidden round back; a transcript whose assistant messages think only first is not
// looked up at all. On a short body (rewritten in place) and a pooled one (read where the
// rewrite left it).
func TestHiddenRoundsAreLookedUpOncePerRequest(t *testing.T) {
	const thinking = `"thinking":{"type":"enabled","budget_tokens":1024}`
	for _, filler := range []int{0, 2 * minPooledBody} {
		t.Run(fmt.Sprintf("%d bytes of filler", filler), func(t *testing.T) {
			var st *countingStore
			h := newHarness(t, func(c *Config) {
				st = &countingStore{FileStore: c.Memory.(*memoryhook.FileStore)}
				c.Memory = st
			})
			pad := strings.Repeat("x", filler)
			ask := func(t *testing.T, msgs string) string {
				t.Helper()
				st.one.Store(0)
				st.batches.Store(0)
				st.keys.Store(0)
				resp := h.post("/v1/messages", keyAcme, `{"model":"claude-opus-4-8","max_tokens":2000,`+thinking+`,"messages":[`+msgs+`]}`)
				got := readAll(t, resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %.300s", resp.StatusCode, got)
				}
				return gjson.Get(got, "content").Raw
			}
			// A conversation of three loops, each thinking again after its memory call: each turn
			// carries back the merged messages before it.
			msgs := `{"role":"user","content":"go ` + pad + `"}`
			for i := range 3 {
				// The API sees two assistant turns for each loop before (its rounds restored).
				answer := fakeapi.Reply{Content: []jsonRaw{fakeapi.Thinking("Now answer.", fmt.Sprintf("sig_b%d", i)), fakeapi.Text("Done.")}}
				script := make([]fakeapi.Reply, 2*i, 2*i+2)
				for j := range script {
					script[j] = answer
				}
				h.fake.SetResponder(fakeapi.Script(append(script,
					fakeapi.Reply{Content: []jsonRaw{fakeapi.Thinking("Memory first.", fmt.Sprintf("sig_a%d", i)), fakeapi.MemoryView("/memories")}},
					answer)...))
				merged := ask(t, msgs)
				if n := gjson.Get(merged, "#").Int(); n != 3 {
					t.Fatalf("loop %d: merged message %s, want two thinking blocks and the text", i, merged)
				}
				if b, k, one := st.batches.Load(), st.keys.Load(), st.one.Load(); b != min(int64(i), 1) || k != int64(i) || one != 0 {
					t.Errorf("turn %d, %d merged messages back: %d batch reads of %d keys and %d single reads, want one read of all", i, i, b, k, one)
				}
				msgs += `,{"role":"assistant","content":` + merged + `},{"role":"user","content":"next"}`
			}
			h.fake.SetResponder(nil)
			ask(t, msgs)
			if b, k, one := st.batches.Load(), st.keys.Load(), st.one.Load(); b != 1 || k != 3 || one != 0 {
				t.Errorf("three merged messages back: %d batch reads of %d keys and %d single reads, want one read of 3", b, k, one)
			}
			last, _ := h.fake.LastRequest("/v1/messages")
			// Each merged message is its hidden rounds again: assistant, memory results, assistant.
			if n := len(last.Messages); n != 1+3*4 {
				t.Errorf("the API got %d messages, want %d", n, 1+3*4)
			}
			if len(last.InputTransformations) != 0 {
				t.Errorf("thinking blocks dropped: %+v", last.InputTransformations)
			}

			// Replies that think first only (no memory round): nothing to look up.
			msgs = `{"role":"user","content":"again ` + pad + `"}`
			for i := range 3 {
				h.fake.SetResponder(fakeapi.Script(fakeapi.Reply{Content: []jsonRaw{fakeapi.Thinking("Just answer.", fmt.Sprintf("sig_c%d", i)), fakeapi.Text("Done.")}}))
				msgs += `,{"role":"assistant","content":` + ask(t, msgs) + `},{"role":"user","content":"next"}`
			}
			h.fake.SetResponder(nil)
			ask(t, msgs)
			if b, one := st.batches.Load(), st.one.Load(); b != 0 || one != 0 {
				t.Errorf("no message thinks after its first block: %d batch and %d single reads, want none", b, one)
			}
		})
	}
}

// hiddenCandidatesByGJSON is hiddenCandidates as gjson reads the messages: the reference.
func hiddenCandidatesByGJSON(msgs string) (idx []int, keys []string) {
	i := -1
	gjson.Parse(msgs).ForEach(func(_, m gjson.Result) bool {
		i++
		if c := m.Get("content"); m.Get("role").Str == "assistant" && c.IsArray() {
			if k := firstThinkingKey(c, 1); k != "" {
				idx, keys = append(idx, i), append(keys, hiddenKeyPrefix+k)
			}
		}
		return true
	})
	return idx, keys
}

func TestHiddenCandidatesReadTheMessagesAsGJSONDoes(t *testing.T) {
	later := `[{"type":"thinking","thinking":"a","signature":"s1"},{"type":"text","text":"t"},{"type":"thinking","thinking":"b","signature":"s2"}]`
	for _, tc := range []struct{ name, msgs string }{
		{"role first", `[{"role":"user","content":"hi"},{"role":"assistant","content":` + later + `}]`},
		{"content first, as the Go SDK writes it", `[{"content":"hi","role":"user"},{"content":` + later + `,"role":"assistant"}]`},
		{"whitespace everywhere", "[ {\n\"role\" : \"assistant\" ,\t\"content\" :\r\n" + later + " } , {\"role\":\"user\",\"content\":[]} ]"},
		{"an escaped key", `[{"r\u006fle":"assistant","content":` + later + `}]`},
		{"an escaped role", `[{"role":"assist\u0061nt","content":` + later + `}]`},
		{"numbers, literals and objects among the members", `[{"n":12.5e3,"x":null,"t":true,"o":{"role":"user"},"role":"assistant","content":` + later + `}]`},
		{"a user message that thinks later is no candidate", `[{"role":"user","content":` + later + `}]`},
		{"thinking first only", `[{"role":"assistant","content":[{"type":"thinking","thinking":"a","signature":"s1"},{"type":"text","text":"t"}]}]`},
		{"a redacted block later", `[{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"redacted_thinking","data":"d1"}]}]`},
		{"content a string", `[{"role":"assistant","content":"thinking\""}]`},
		{"strings with brackets and escaped quotes", `[{"role":"user","content":"]} \"role\":\"assistant\" {["},{"role":"assistant","content":` + later + `}]`},
		{"an empty array", `[]`},
		{"not an array", `{"role":"assistant","content":` + later + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, keys := hiddenCandidates([]byte(tc.msgs))
			wantIdx, wantKeys := hiddenCandidatesByGJSON(tc.msgs)
			if !strings.HasPrefix(tc.msgs, "[") {
				wantIdx, wantKeys = nil, nil
			}
			var idx []int
			for _, c := range at {
				idx = append(idx, c.index)
			}
			if fmt.Sprint(idx, keys) != fmt.Sprint(wantIdx, wantKeys) {
				t.Errorf("candidates %v %q, gjson reads %v %q", idx, keys, wantIdx, wantKeys)
			}
		})
	}
}
