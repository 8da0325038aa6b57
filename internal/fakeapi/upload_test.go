package fakeapi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

const chunkedBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

// postChunked sends chunkedBody without a Content-Length (net/http then sends it chunked).
func postChunked(t *testing.T, base string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", io.MultiReader(strings.NewReader(chunkedBody)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if len(resp.TransferEncoding) > 0 && req.ContentLength != -1 {
		t.Fatal("request was not chunked")
	}
	return resp.StatusCode, string(b)
}

func TestRequestBodyFraming(t *testing.T) {
	t.Run("a chunked body is a request like any other by default", func(t *testing.T) {
		api, base := newServer(t)
		if st, body := postChunked(t, base); st != 200 {
			t.Fatalf("status %d: %s", st, body)
		}
		if reqs := api.Requests(); len(reqs) != 1 || string(reqs[0].Body) != chunkedBody {
			t.Fatalf("recorded %d requests", len(reqs))
		}
	})
	// An upload cut before its end (the last chunk, or its Content-Length) never reached
	// the API as a request: it is not recorded.
	t.Run("an upload cut before its last chunk is no request", func(t *testing.T) {
		api, base := newServer(t)
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		half := chunkedBody[:len(chunkedBody)/2]
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\n"+
			"Anthropic-Version: 2023-06-01\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(half), half)
		c.(*net.TCPConn).CloseWrite()
		// Whatever the fake answers (if anything) once it sees the cut, it records nothing.
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatalf("a cut upload answered %s", resp.Status)
			}
		}
		c.Close()
		if n := len(api.Requests()); n != 0 {
			t.Fatalf("recorded %d requests", n)
		}
	})
	t.Run("an upload cut short of its Content-Length is no request", func(t *testing.T) {
		api, base := newServer(t)
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\n"+
			"Anthropic-Version: 2023-06-01\r\nContent-Length: %d\r\n\r\n%s", len(chunkedBody), chunkedBody[:len(chunkedBody)/2])
		c.(*net.TCPConn).CloseWrite()
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatalf("a cut upload answered %s", resp.Status)
			}
		}
		if n := len(api.Requests()); n != 0 {
			t.Fatalf("recorded %d requests", n)
		}
	})
}
