package fakeapi

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestBatchCreate(t *testing.T) {
	ok := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	withCM := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}],` +
		`"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`
	tests := []struct {
		name    string
		body    string
		noBetas bool
		status  int
		want    string // in the error message, or the request count
	}{
		{"valid params are accepted and the batch is in progress", `{"requests":[{"custom_id":"a","params":` + ok + `},{"custom_id":"b","params":` + withCM + `}]}`, false, 200, "2"},
		{"params are checked with the /v1/messages rules", `{"requests":[{"custom_id":"a","params":{"model":"m","messages":[]}}]}`, false, 400, "requests.0.params: max_tokens: Field required"},
		{"context_management in params needs the beta on the batch", `{"requests":[{"custom_id":"a","params":` + withCM + `}]}`, true, 400, "requests.0.params: context_management: requires the anthropic-beta header"},
		{"custom_id has the API's shape", `{"requests":[{"custom_id":"a b","params":` + ok + `}]}`, false, 400, "requests.0.custom_id"},
		{"custom_id is unique", `{"requests":[{"custom_id":"a","params":` + ok + `},{"custom_id":"a","params":` + ok + `}]}`, false, 400, "used more than once"},
		{"requests is required", `{}`, false, 400, "requests: Field required"},
		{"an empty batch is refused", `{"requests":[]}`, false, 400, "at least 1 item"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api, base := newServer(t)
			resp, body := do(t, base, call{path: "/v1/messages/batches", body: tc.body, noBetas: tc.noBetas})
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 {
				b := gjson.ParseBytes(body)
				if b.Get("type").Str != "message_batch" || b.Get("processing_status").Str != "in_progress" ||
					b.Get("request_counts.processing").String() != tc.want || !strings.HasPrefix(b.Get("id").Str, "msgbatch_") {
					t.Fatalf("batch: %s", body)
				}
			} else if msg := gjson.GetBytes(body, "error.message").Str; !strings.Contains(msg, tc.want) ||
				gjson.GetBytes(body, "type").Str != "error" {
				t.Fatalf("error %s, want %q in the message", body, tc.want)
			}
			r, found := api.LastRequest("/v1/messages/batches")
			if !found || string(r.Body) != tc.body {
				t.Fatalf("batch not recorded as sent")
			}
		})
	}
}
