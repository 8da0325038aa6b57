package fakeapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"
)

func decode(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	switch enc {
	case "":
		return b
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("encoding %q", enc)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode %s: %v", enc, err)
	}
	return out
}

func TestCompressedReplies(t *testing.T) {
	cases := []struct {
		name     string
		compress bool
		accept   string
		forced   string
		want     string
	}{
		{name: "without the option replies are plain", accept: "gzip, br", want: ""},
		{name: "gzip when only gzip is accepted", compress: true, accept: "gzip", want: "gzip"},
		{name: "zstd is preferred when Claude Code's list is accepted", compress: true, accept: "gzip, deflate, br, zstd", want: "zstd"},
		{name: "br when br and gzip are accepted", compress: true, accept: "gzip;q=1.0, br", want: "br"},
		{name: "a q=0 encoding is not used", compress: true, accept: "br;q=0, gzip", want: "gzip"},
		{name: "nothing accepted means plain", compress: true, accept: "", want: ""},
		{name: "a reply can force an encoding the client did not ask for", accept: "", forced: "br", want: "br"},
		{name: "a reply can force identity", compress: true, accept: "gzip", forced: "identity", want: ""},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			name := tc.name
			if stream {
				name += " (stream)"
			}
			t.Run(name, func(t *testing.T) {
				api, base := newServer(t, WithCompress(tc.compress))
				api.Enqueue(Reply{Content: Blocks(Text("compressed hello")).Content, Encoding: tc.forced})
				extra := ""
				if stream {
					extra = `{"stream":true}`
				}
				// Setting Accept-Encoding ourselves stops Go's transparent gzip.
				accept := tc.accept
				if accept == "" {
					accept = "identity"
				}
				resp, out := do(t, base, call{body: body(extra), header: map[string]string{"Accept-Encoding": accept}})
				if got := resp.Header.Get("Content-Encoding"); got != tc.want {
					t.Fatalf("content-encoding %q, want %q", got, tc.want)
				}
				plain := decode(t, tc.want, out)
				if stream {
					evs, err := parseSSE(t, bytes.NewReader(plain))
					if err != nil || !strings.HasSuffix(names(evs), "message_delta message_stop") {
						t.Fatalf("stream %v: %s", err, plain)
					}
					plain = []byte(accumulate(t, evs))
				}
				if gjson.GetBytes(plain, "content.0.text").Str != "compressed hello" {
					t.Errorf("decoded %s", plain)
				}
			})
		}
	}
}

func TestACompressedRequestBodyIsDecoded(t *testing.T) {
	api, base := newServer(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(body("")))
	_ = zw.Close()
	resp, out := do(t, base, call{body: buf.String(), header: map[string]string{"Content-Encoding": "gzip"}})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if r, _ := api.LastRequest(""); string(r.Body) != body("") {
		t.Errorf("recorded body %q", r.Body)
	}
	resp, out = do(t, base, call{body: "not gzip", header: map[string]string{"Content-Encoding": "gzip"}})
	if resp.StatusCode != 400 || !strings.Contains(gjson.GetBytes(out, "error.message").Str, "decode gzip") {
		t.Errorf("%d %s", resp.StatusCode, out)
	}
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestControlEndpoints(t *testing.T) {
	api, base := newServer(t)

	t.Run("script enqueues replies in their JSON form", func(t *testing.T) {
		st, out := postJSON(t, base+"/_fake/script", `[{"text":"first","usage":{"input_tokens":5,"output_tokens":6}},
			{"content":[{"type":"tool_use","name":"memory","input":{"command":"view","path":"/memories"}}]},
			{"status":429,"header":{"retry-after":"4"},"error":{"type":"rate_limit_error","message":"slow down"}}]`)
		if st != 200 || gjson.Get(out, "queued").Int() != 3 {
			t.Fatalf("%d %s", st, out)
		}
		_, a := do(t, base, call{body: body("")})
		if gjson.GetBytes(a, "content.0.text").Str != "first" || gjson.GetBytes(a, "usage.output_tokens").Int() != 6 {
			t.Errorf("first %s", a)
		}
		_, b := do(t, base, call{body: body("")})
		if gjson.GetBytes(b, "content.0.name").Str != "memory" || gjson.GetBytes(b, "stop_reason").Str != "tool_use" {
			t.Errorf("second %s", b)
		}
		resp, c := do(t, base, call{body: body("")})
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "4" || gjson.GetBytes(c, "error.message").Str != "slow down" {
			t.Errorf("third %d %s", resp.StatusCode, c)
		}
	})
	t.Run("script turns answer by conversation position", func(t *testing.T) {
		st, out := postJSON(t, base+"/_fake/script", `{"reset":true,"turns":[{"text":"turn zero"},{"text":"turn one"}]}`)
		if st != 200 || gjson.Get(out, "turns").Int() != 2 || len(api.Requests()) != 0 {
			t.Fatalf("%d %s", st, out)
		}
		_, a := do(t, base, call{body: body(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`)})
		if gjson.GetBytes(a, "content.0.text").Str != "turn one" {
			t.Errorf("%s", a)
		}
	})
	t.Run("requests lists what was seen, filtered by path and seq", func(t *testing.T) {
		do(t, base, call{path: "/v1/messages/count_tokens", body: body("")})
		resp, err := http.Get(base + "/_fake/requests?path=/v1/messages/count_tokens")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var reqs []RequestJSON
		if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
			t.Fatal(err)
		}
		if len(reqs) != 1 || !reqs[0].CountTokens || gjson.GetBytes(reqs[0].Body, "model").Str != "claude-sonnet-4-5" ||
			reqs[0].Header.Get("X-Api-Key") != "sk-test" || len(reqs[0].Messages) != 1 || reqs[0].Outcome != OutcomeOK {
			t.Errorf("%+v", reqs)
		}
		all, _ := httpGet(base + "/_fake/requests?since=" + itoa(reqs[0].Seq-1))
		if n := len(gjson.Parse(all.body).Array()); n != 1 {
			t.Errorf("since: %d requests", n)
		}
	})
	t.Run("options can be read and changed", func(t *testing.T) {
		st, out := postJSON(t, base+"/_fake/options", `{"compress":true,"event_delay_ms":1.5,"faults":{"rate":0.25,"seed":3}}`)
		if st != 200 || !gjson.Get(out, "compress").Bool() || gjson.Get(out, "event_delay_ms").Float() != 1.5 || gjson.Get(out, "faults.rate").Float() != 0.25 {
			t.Errorf("%d %s", st, out)
		}
		if o := api.CurrentOptions(); !o.Compress || o.EventDelay.Microseconds() != 1500 || o.Faults == nil {
			t.Errorf("%+v", o)
		}
		postJSON(t, base+"/_fake/options", `{"compress":false,"event_delay_ms":0,"faults":null}`)
	})
	t.Run("reset forgets everything", func(t *testing.T) {
		api.Enqueue(TextReply("x"))
		if st, _ := postJSON(t, base+"/_fake/reset", ``); st != 200 || api.Pending() != 0 || len(api.Requests()) != 0 {
			t.Errorf("status %d pending %d", st, api.Pending())
		}
	})
	t.Run("a bad script is a 400 naming the problem", func(t *testing.T) {
		st, out := postJSON(t, base+"/_fake/script", `[{"content":[{"text":"no type"}]}]`)
		if st != 400 || !strings.Contains(out, "needs a type") {
			t.Errorf("%d %s", st, out)
		}
	})
	t.Run("an unknown endpoint lists the known ones", func(t *testing.T) {
		res, _ := httpGet(base + "/_fake/nope")
		if res.status != 404 || !strings.Contains(res.body, "/_fake/script") {
			t.Errorf("%d %s", res.status, res.body)
		}
	})
}

func TestAReplyRoundTripsThroughJSON(t *testing.T) {
	in := richReply()
	in.Status, in.CutAfter, in.Encoding = 0, 4, "gzip"
	in.Header = http.Header{"X-A": {"1", "2"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Reply
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(out)
	if string(b) != string(b2) {
		t.Errorf("\n%s\n%s", b, b2)
	}
}
