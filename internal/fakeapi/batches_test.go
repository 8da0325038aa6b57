package fakeapi

import (
	"io"
	"net/http"
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

// batchCall is a request to a batch route with the API's headers.
func batchCall(t *testing.T, method, url string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestBatchLifecycle(t *testing.T) {
	params := func(model string) string {
		return `{"model":"` + model + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	}
	create := func(t *testing.T, base string, ids ...string) string {
		t.Helper()
		var reqs []string
		for _, id := range ids {
			reqs = append(reqs, `{"custom_id":"`+id+`","params":`+params("m-"+id)+`}`)
		}
		resp, body := do(t, base, call{path: "/v1/messages/batches", body: `{"requests":[` + strings.Join(reqs, ",") + `]}`})
		if resp.StatusCode != 200 {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		return gjson.GetBytes(body, "id").Str
	}
	results := func(t *testing.T, base, id string) map[string]gjson.Result {
		t.Helper()
		st, body := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id+"/results")
		if st != 200 {
			t.Fatalf("results: %d %s", st, body)
		}
		out := map[string]gjson.Result{}
		for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			out[gjson.Get(l, "custom_id").Str] = gjson.Get(l, "result")
		}
		return out
	}

	t.Run("processed: every request succeeds on the batch tier, with its results_url", func(t *testing.T) {
		api, base := newServer(t)
		api.Enqueue(Reply{Usage: &Usage{InputTokens: 7, OutputTokens: 3}}, ErrorReply(529, "overloaded_error", "Overloaded"))
		id := create(t, base, "a", "b", "c")
		if st, body := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id+"/results"); st != 400 {
			t.Fatalf("results before the batch ended: %d %s", st, body)
		}
		if err := api.ProcessBatch(id, 0); err != nil {
			t.Fatal(err)
		}
		st, body := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id)
		b := gjson.ParseBytes(body)
		if st != 200 || b.Get("processing_status").Str != BatchEnded || b.Get("request_counts.succeeded").Int() != 2 ||
			b.Get("request_counts.errored").Int() != 1 || b.Get("request_counts.processing").Int() != 0 || b.Get("ended_at").Type == gjson.Null ||
			b.Get("results_url").Str != base+"/v1/messages/batches/"+id+"/results" {
			t.Fatalf("retrieve: %d %s", st, body)
		}
		rs := results(t, base, id)
		if a := rs["a"]; a.Get("type").Str != ResultSucceeded || a.Get("message.usage.input_tokens").Int() != 7 ||
			a.Get("message.usage.service_tier").Str != "batch" || a.Get("message.model").Str != "m-a" {
			t.Errorf("a: %s", a.Raw)
		}
		if b := rs["b"]; b.Get("type").Str != ResultErrored || b.Get("error.type").Str != "error" || b.Get("error.error.type").Str != "overloaded_error" {
			t.Errorf("b: %s", b.Raw)
		}
		if c := rs["c"]; c.Get("type").Str != ResultSucceeded {
			t.Errorf("c: %s", c.Raw)
		}
		if st, body := batchCall(t, http.MethodDelete, base+"/v1/messages/batches/"+id); st != 200 || gjson.GetBytes(body, "type").Str != "message_batch_deleted" {
			t.Errorf("delete: %d %s", st, body)
		}
		if st, _ := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id); st != 404 {
			t.Errorf("retrieve after delete: %d", st)
		}
	})

	t.Run("canceled part way: what ran succeeded, the rest is canceled", func(t *testing.T) {
		api, base := newServer(t)
		id := create(t, base, "a", "b", "c")
		if err := api.ProcessBatch(id, 1); err != nil {
			t.Fatal(err)
		}
		st, body := batchCall(t, http.MethodPost, base+"/v1/messages/batches/"+id+"/cancel")
		if st != 200 || gjson.GetBytes(body, "processing_status").Str != BatchCanceling || gjson.GetBytes(body, "cancel_initiated_at").Type == gjson.Null ||
			gjson.GetBytes(body, "request_counts.processing").Int() != 2 || gjson.GetBytes(body, "results_url").Type != gjson.Null {
			t.Fatalf("cancel: %d %s", st, body)
		}
		if st, _ := batchCall(t, http.MethodDelete, base+"/v1/messages/batches/"+id); st != 400 {
			t.Errorf("delete while canceling: %d", st)
		}
		if err := api.ProcessBatch(id, 0); err != nil {
			t.Fatal(err)
		}
		rs := results(t, base, id)
		if rs["a"].Get("type").Str != ResultSucceeded || rs["b"].Get("type").Str != ResultCanceled || rs["c"].Get("type").Str != ResultCanceled {
			t.Errorf("results %v", rs)
		}
		if st, _ := batchCall(t, http.MethodPost, base+"/v1/messages/batches/"+id+"/cancel"); st != 400 {
			t.Errorf("cancel after the end: %d", st)
		}
	})

	t.Run("expired: the requests still processing expire", func(t *testing.T) {
		api, base := newServer(t)
		id := create(t, base, "a", "b")
		if err := api.ProcessBatch(id, 1); err != nil {
			t.Fatal(err)
		}
		if err := api.ExpireBatch(id); err != nil {
			t.Fatal(err)
		}
		_, body := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id)
		if gjson.GetBytes(body, "request_counts.expired").Int() != 1 || gjson.GetBytes(body, "request_counts.succeeded").Int() != 1 {
			t.Errorf("retrieve: %s", body)
		}
		if rs := results(t, base, id); rs["b"].Get("type").Str != ResultExpired {
			t.Errorf("results %v", rs)
		}
	})

	t.Run("list is newest first; unknown ids are 404; a key is required", func(t *testing.T) {
		api, base := newServer(t)
		first, second := create(t, base, "a"), create(t, base, "b")
		st, body := batchCall(t, http.MethodGet, base+"/v1/messages/batches")
		if st != 200 || gjson.GetBytes(body, "data.0.id").Str != second || gjson.GetBytes(body, "data.1.id").Str != first ||
			gjson.GetBytes(body, "first_id").Str != second || gjson.GetBytes(body, "has_more").Bool() {
			t.Errorf("list: %d %s", st, body)
		}
		if st, body := batchCall(t, http.MethodGet, base+"/v1/messages/batches/msgbatch_nope"); st != 404 || gjson.GetBytes(body, "error.type").Str != "not_found_error" {
			t.Errorf("unknown id: %d %s", st, body)
		}
		if err := api.ProcessBatch("msgbatch_nope", 0); err != ErrNoBatch {
			t.Errorf("ProcessBatch of an unknown id: %v", err)
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/messages/batches/"+first, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("without a key: %d", resp.StatusCode)
		}
	})

	t.Run("the control endpoints process and expire", func(t *testing.T) {
		_, base := newServer(t)
		id := create(t, base, "a", "b")
		resp, body := do(t, base, call{path: "/_fake/batches/process", body: `{"id":"` + id + `","requests":1}`})
		if resp.StatusCode != 200 || gjson.GetBytes(body, "request_counts.succeeded").Int() != 1 {
			t.Fatalf("process: %d %s", resp.StatusCode, body)
		}
		resp, body = do(t, base, call{path: "/_fake/batches/expire", body: `{"id":"` + id + `"}`})
		if resp.StatusCode != 200 || gjson.GetBytes(body, "processing_status").Str != BatchEnded || gjson.GetBytes(body, "request_counts.expired").Int() != 1 {
			t.Fatalf("expire: %d %s", resp.StatusCode, body)
		}
	})
}
