package policy

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

func TestRewriteInfoSaysWhereTheConversationsMembersAre(t *testing.T) {
	p := &Policy{Tenant: "acme"}
	bodies := []string{
		`{"model":"m","system":"s \"q\"","tools":[{"name":"t"}],"messages":[{"role":"user","content":"hi"}],"thread":{"type":"continue","previous_message_id":"msg_1"},"diagnostics":null}`,
		` { "messages" : [ ] , "m" : 1 , "system" : [ {"type":"text","text":"]"} ] } `,
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`,
	}
	for _, body := range bodies {
		_, info, err := p.Rewrite([]byte(body), http.Header{})
		if err != nil {
			t.Fatal(err)
		}
		for key, r := range map[string]Range{"system": info.Top.System, "tools": info.Top.Tools, "messages": info.Top.Messages,
			"thread": info.Top.Thread, "diagnostics": info.Top.Diagnostics} {
			want := gjson.Get(body, key)
			if got := r.Of([]byte(body)); string(got) != want.Raw || (got == nil) != !want.Exists() {
				t.Errorf("%s of %s: got %q, want %q", key, body, got, want.Raw)
			}
		}
	}
}
