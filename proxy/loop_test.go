package proxy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// TestNextBodyFromPartsIsTheJoinedBodyContinued: the request after a memory round, built from
// the previous request's parts in one copy with the turns (and the diagnosis ask) spliced in,
// is byte for byte the joined body with the turns appended to its messages and
// diagnostics.previous_message_id set as sjson sets it (up to the whitespace around the
// body), wherever the parts are cut.
func TestNextBodyFromPartsIsTheJoinedBodyContinued(t *testing.T) {
	const id = "msg_round_1"
	asst, results := []byte(`[{"type":"tool_use","id":"toolu_1","name":"memory","input":{"command":"view","path":"/memories"}}]`),
		[]byte(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"Here's the content"}]`)
	bodies := map[string]string{
		"messages last":                    `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`,
		"messages first, tools after":      `{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t","input_schema":{}}],"model":"m"}`,
		"empty messages":                   `{"model":"m","messages":[ ]}`,
		"leading whitespace":               "  \n{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]} ",
		"diagnostics asked already":        `{"model":"m","diagnostics":{"previous_message_id":"msg_client_long_id_0000"},"messages":[{"role":"user","content":"hi"}]}`,
		"diagnostics after the messages":   `{"model":"m","messages":[{"role":"user","content":"hi"}],"diagnostics":{"x":1}}`,
		"diagnostics not an object (kept)": `{"model":"m","messages":[{"role":"user","content":"hi"}],"diagnostics":null}`,
	}
	for name, body := range bodies {
		for _, diagnose := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/diagnose=%v", name, diagnose), func(t *testing.T) {
				// The reference: the joined body, the turns appended, then sjson.
				msgs := gjson.Get(body, "messages")
				end := msgs.Index + len(msgs.Raw) - 1
				sep := ","
				if len(gjson.Get(body, "messages").Array()) == 0 {
					sep = ""
				}
				want := []byte(body[:end] + sep + `{"role":"assistant","content":` + string(asst) + `},{"role":"user","content":` +
					string(results) + `}` + body[end:])
				if diagnose {
					if out, err := sjson.SetBytes(want, "diagnostics.previous_message_id", id); err == nil {
						want = out
					}
				}
				for cut := 0; cut <= len(body); cut += 7 {
					parts := [][]byte{[]byte(body[:cut]), []byte(body[cut:])}
					got, err := nextBody(parts, id, asst, results, diagnose)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) { // sjson drops the whitespace around a body
						t.Fatalf("cut at %d:\n got %s\nwant %s", cut, got, want)
					}
				}
			})
		}
	}
	t.Run("a body without messages is an error", func(t *testing.T) {
		if _, err := nextBody([][]byte{[]byte(`{"model":"m"}`)}, id, asst, results, true); err == nil {
			t.Fatal("no error")
		}
	})
}

// TestSpliceRoundContinuesThePiecesWithoutCopyingThem: a memory round on a body in pieces
// whose messages end is known adds its turns between the pieces, leaves the client's pieces
// as they are (the same arrays), and names the reply in the diagnostics field askDiagnostics
// added; two rounds in a row make the request nextBody makes.
func TestSpliceRoundContinuesThePiecesWithoutCopyingThem(t *testing.T) {
	asst, results := []byte(`[{"type":"tool_use","id":"toolu_1","name":"memory","input":{"command":"view","path":"/memories"}}]`),
		[]byte(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]`)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9}`,
		`{"model":"m","messages":[ ]}`,
	} {
		for _, diagnose := range []bool{false, true} {
			for cut := 1; cut < len(body); cut += 5 {
				client := []byte(body)
				parts := [][]byte{client[:cut], client[cut:]}
				if diagnose { // as askDiagnostics: the field before the last '}', in a piece of its own
					v := &conversation{asked: true}
					parts = v.withDiagnostics(parts)
				}
				m := gjson.Get(body, "messages")
				end := posIn(parts, client, m.Index+len(m.Raw)-1)
				if !end.ok {
					t.Fatalf("cut %d: the messages' end not found in the pieces", cut)
				}
				want := [][]byte{joinParts(parts)}
				got := parts
				for round, id := range []string{"msg_1", "msg_2"} {
					var ok bool
					if got, end, ok = spliceRound(got, end, id, asst, results, diagnose); !ok {
						t.Fatalf("cut %d, round %d: not spliced", cut, round)
					}
					w, err := nextBody(want, id, asst, results, diagnose)
					if err != nil {
						t.Fatal(err)
					}
					want = [][]byte{w}
					g := joinParts(got)
					if !gjson.ValidBytes(g) {
						t.Fatalf("cut %d, round %d: not JSON: %s", cut, round, g)
					}
					for _, path := range []string{"messages", "model", "max_tokens", "diagnostics.previous_message_id"} {
						if a, b := gjson.GetBytes(g, path).Raw, gjson.GetBytes(w, path).Raw; a != b {
							t.Fatalf("cut %d, round %d, %s: %s, nextBody makes %s", cut, round, path, a, b)
						}
					}
				}
				if &got[0][0] != &client[0] {
					t.Fatalf("cut %d: the client's first piece was copied", cut)
				}
			}
		}
	}
}
