package fakeapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

func TestScriptedErrorRepliesKeepTheirStatusTypeAndHeaders(t *testing.T) {
	cases := []struct {
		name   string
		reply  Reply
		status int
		typ    string
		header string
	}{
		{"a 429 carries retry-after", RateLimited("7"), 429, "rate_limit_error", "7"},
		{"a 529 is overloaded_error", Overloaded(), 529, "overloaded_error", ""},
		{"a bare 500 gets api_error", Reply{Status: 500}, 500, "api_error", ""},
		{"a 503 gets api_error", Reply{Status: 503, Header: http.Header{"Retry-After": {"2"}}}, 503, "api_error", "2"},
		{"an error without status gets its type's status", Reply{Error: &APIError{Type: "permission_error", Message: "no"}}, 403, "permission_error", ""},
	}
	api, base := newServer(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api.Enqueue(tc.reply)
			resp, out := do(t, base, call{body: body(`{"stream":true}`)})
			if resp.StatusCode != tc.status || gjson.GetBytes(out, "error.type").Str != tc.typ ||
				gjson.GetBytes(out, "type").Str != "error" || resp.Header.Get("Retry-After") != tc.header ||
				!strings.HasPrefix(resp.Header.Get("request-id"), "req_fake_") {
				t.Errorf("%d %v %s", resp.StatusCode, resp.Header, out)
			}
		})
	}
}

func TestCutAfterClosesTheConnectionMidStream(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{Content: Blocks(Text("a fairly long text to stream")).Content, CutAfter: 3})
	resp, out := do(t, base, call{body: body(`{"stream":true}`), cut: true})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	evs, _ := parseSSE(t, bytes.NewReader(out))
	if got := names(evs); got != "message_start ping content_block_start content_block_delta" {
		t.Errorf("events before the cut: %s", got)
	}
	if r, _ := api.LastRequest(""); r.Outcome != OutcomeCut {
		t.Errorf("outcome %q", r.Outcome)
	}
}

func TestTheCutIsSeenAsAnUnexpectedEOF(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{CutAfter: 1}, Reply{CutAfter: 1})
	for _, stream := range []string{`{"stream":true}`, ""} {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body(stream)))
		req.Header.Set("X-Api-Key", "k")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("stream %q: read error %v, want unexpected EOF", stream, err)
		}
	}
}

func TestDropClosesTheConnectionBeforeAnyByte(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{Drop: true})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body("")))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d, want a transport error", resp.StatusCode)
	}
	if r, _ := api.LastRequest(""); r.Outcome != OutcomeDropped {
		t.Errorf("outcome %q", r.Outcome)
	}
}

func TestAnErrorEventEndsTheStream(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{ErrorEvent: &APIError{Type: "overloaded_error", Message: "Overloaded"}, ErrorAfter: 3})
	resp, out := do(t, base, call{body: body(`{"stream":true}`)})
	evs, err := parseSSE(t, bytes.NewReader(out))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if got := names(evs); got != "message_start ping content_block_start content_block_delta error" {
		t.Errorf("events %s", got)
	}
	if e := evs[len(evs)-1].data; compactJSON(e) != `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` {
		t.Errorf("error event %s", e)
	}
}

func TestAClientLeavingDuringTheDelayIsRecordedAsCanceled(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{Delay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(body("")))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	for api.Pending() > 0 { // the handler took the reply and is waiting
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("request finished despite an hour's delay")
	}
	for {
		if r, ok := api.LastRequest(""); ok && r.Outcome == OutcomeCanceled {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func TestEventDelayStreamsEventsOneByOne(t *testing.T) {
	api, base := newServer(t)
	api.Enqueue(Reply{EventDelay: 20 * time.Millisecond})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body(`{"stream":true}`)))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first event arrives while the handler is still sleeping between
	// later events: the request is not finished yet.
	buf := make([]byte, 14)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "event: message" {
		t.Fatalf("first bytes %q %v", buf, err)
	}
	if r, _ := api.LastRequest(""); r.Outcome != "" {
		t.Errorf("outcome %q before the stream ended", r.Outcome)
	}
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "message_stop") {
		t.Errorf("stream did not finish: %s", rest)
	}
}

func TestRandomFaultsAreReproducibleForASeed(t *testing.T) {
	run := func() []string {
		api, base := newServer(t, WithFaults(Faults{Rate: 0.5, Seed: 42, Kinds: []string{Fault429, Fault529, FaultCut, FaultErrorEvent}}))
		var got []string
		for range 30 {
			resp, _ := do(t, base, call{body: body(`{"stream":true}`), cut: true})
			r, _ := api.LastRequest("")
			got = append(got, http.StatusText(resp.StatusCode)+"/"+r.Outcome)
		}
		return got
	}
	a, b := run(), run()
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("same seed, different faults:\n%v\n%v", a, b)
	}
	kinds := map[string]bool{}
	for _, o := range a {
		kinds[o] = true
	}
	for _, want := range []string{"OK/ok", "Too Many Requests/error", "OK/cut", "OK/error_event"} {
		if !kinds[want] {
			t.Errorf("30 requests at rate 0.5 never gave %s: %v", want, a)
		}
	}
}

func TestStatusFaultsDoNotUseUpQueuedReplies(t *testing.T) {
	api, base := newServer(t, WithFaults(Faults{Rate: 1, Kinds: []string{Fault529}}))
	api.Enqueue(TextReply("kept"))
	if resp, _ := do(t, base, call{body: body("")}); resp.StatusCode != 529 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	api.SetOptions(Options{})
	if _, out := do(t, base, call{body: body("")}); gjson.GetBytes(out, "content.0.text").Str != "kept" {
		t.Errorf("reply after the fault: %s", out)
	}
}

func TestConcurrentAgentsFollowTheirScripts(t *testing.T) {
	api, base := newServer(t, WithTextChunks(2))
	api.SetResponder(Script(Blocks(MemoryView("/memories")), Blocks(MemoryCreate("/memories/n.md", "x")), TextReply("done")))
	const agents = 40
	var wg sync.WaitGroup
	errs := make(chan string, agents)
	for i := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := i%2 == 0
			msgs := []string{`{"role":"user","content":"remember"}`}
			for turn := 0; ; turn++ {
				extra := `{"messages":[` + strings.Join(msgs, ",") + `]`
				if stream {
					extra += `,"stream":true`
				}
				_, out := do(t, base, call{body: body(extra + "}")})
				content := gjson.GetBytes(out, "content").Raw
				if stream {
					evs, _ := parseSSE(t, bytes.NewReader(out))
					content = gjson.Get(accumulate(t, evs), "content").Raw
				}
				blk := gjson.Get(content, "0")
				if blk.Get("type").Str == "text" {
					if blk.Get("text").Str != "done" || turn != 2 {
						errs <- "agent ended with " + blk.Raw
					}
					return
				}
				msgs = append(msgs, `{"role":"assistant","content":`+content+`}`,
					`{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+blk.Get("id").Str+`","content":"ok"}]}`)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := len(api.Requests()); n != agents*3 {
		t.Errorf("%d requests, want %d", n, agents*3)
	}
}
