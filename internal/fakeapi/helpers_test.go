package fakeapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func newServer(t *testing.T, opts ...Option) (*API, string) {
	t.Helper()
	api := New(opts...)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

type call struct {
	method  string // "" is POST
	path    string
	body    string
	header  map[string]string
	noAuth  bool
	noBetas bool
	cut     bool // the reply may end early: a read error is not fatal
}

var defaultBetas = BetaContextManagement + "," + BetaMessageThreads + "," + BetaCompact + "," + BetaCompactOnDemand

func do(t *testing.T, base string, c call) (*http.Response, []byte) {
	t.Helper()
	if c.path == "" {
		c.path = "/v1/messages"
	}
	if c.method == "" {
		c.method = http.MethodPost
	}
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if !c.noAuth {
		req.Header.Set("X-Api-Key", "sk-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
	}
	if !c.noBetas {
		req.Header.Set("Anthropic-Beta", defaultBetas)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !c.cut {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

type event struct {
	name string
	data string
}

func parseSSE(t *testing.T, r io.Reader) ([]event, error) {
	t.Helper()
	var evs []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var cur event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		case line == "":
			if cur.name != "" {
				if !json.Valid([]byte(cur.data)) {
					t.Errorf("event %s: data is not JSON: %s", cur.name, cur.data)
				}
				if got := gjson.Get(cur.data, "type").Str; got != cur.name {
					t.Errorf("event %s: data type %q", cur.name, got)
				}
				evs = append(evs, cur)
			}
			cur = event{}
		}
	}
	return evs, sc.Err()
}

func names(evs []event) string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return strings.Join(n, " ")
}

// body builds a request body from a JSON object literal with defaults.
func body(extra string) string {
	b := `{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
	if extra == "" {
		return b
	}
	var base, add map[string]json.RawMessage
	_ = json.Unmarshal([]byte(b), &base)
	if err := json.Unmarshal([]byte(extra), &add); err != nil {
		panic(err)
	}
	for k, v := range add {
		if string(v) == "null" && k != "context_management" {
			delete(base, k)
			continue
		}
		base[k] = v
	}
	out, _ := json.Marshal(base)
	return string(out)
}

func compactJSON(s string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return s
	}
	return buf.String()
}

type getResult struct {
	status int
	header http.Header
	body   string
}

func httpGet(url string) (getResult, error) {
	resp, err := http.Get(url)
	if err != nil {
		return getResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return getResult{resp.StatusCode, resp.Header, string(b)}, err
}

func asError[T error](err error, target *T) bool { return errors.As(err, target) }
