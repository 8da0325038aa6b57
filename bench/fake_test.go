package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tidwall/gjson"
)

// TestBenchFakeMemoryCalls: the fake's memory script per X-Bench-Memory: a
// view, or a create and a delete of a path no other request uses.
func TestBenchFakeMemoryCalls(t *testing.T) {
	srv := httptest.NewServer(newBenchFake(0, 10))
	defer srv.Close()
	body := smallBody(2048, false)
	call := func(mode string) gjson.Result {
		t.Helper()
		tg := target{url: srv.URL, key: keyMemory, memory: mode != "", write: mode == "write"}
		resp, err := http.DefaultClient.Do(tg.request(t.Context(), body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %s", resp.Status, err, b)
		}
		return gjson.GetBytes(b, `content.#(type=="tool_use")#.input`)
	}
	if got := call("view").Array(); len(got) != 1 || got[0].Get("command").Str != "view" {
		t.Errorf("view mode: %v", got)
	}
	if got := call("").Array(); len(got) != 0 {
		t.Errorf("no memory: %v", got)
	}
	paths := map[string]bool{}
	for range 2 {
		got := call("write").Array()
		if len(got) != 2 || got[0].Get("command").Str != "create" || got[1].Get("command").Str != "delete" ||
			got[0].Get("path").Str != got[1].Get("path").Str {
			t.Fatalf("write mode: %v", got)
		}
		paths[got[0].Get("path").Str] = true
	}
	if len(paths) != 2 {
		t.Errorf("write mode reused a path: %v", paths)
	}
}

// TestThinkingBodyIsAcceptedAsItThinks: row 5t's body turns thinking on and makes every assistant
// turn think first, every tenth again after a text block; the fake (binding on) takes it.
func TestThinkingBodyIsAcceptedAsItThinks(t *testing.T) {
	srv := httptest.NewServer(newBenchFake(0, 10))
	defer srv.Close()
	for _, body := range [][]byte{smallBody(2048, false), largeBody(256<<10, 40, false)} {
		tb := thinkingBody(body)
		if !gjson.ValidBytes(tb) || gjson.GetBytes(tb, "thinking.type").Str != "enabled" {
			t.Fatalf("not a thinking request: %.200s", tb)
		}
		assistants := gjson.GetBytes(tb, `messages.#(role=="assistant")#.content`).Array()
		for i, c := range assistants {
			blocks := c.Array()
			later := len(blocks) > 2 && blocks[2].Get("type").Str == "thinking"
			if blocks[0].Get("type").Str != "thinking" || later != (i%10 == 9) {
				t.Errorf("assistant turn %d: %s", i, c.Raw)
			}
		}
		if len(gjson.GetBytes(body, `messages.#(role=="assistant")#`).Array()) != len(assistants) {
			t.Errorf("the turns changed")
		}
		resp, err := http.DefaultClient.Do(target{url: srv.URL, key: keyMemory}.request(t.Context(), tb))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the fake refused it: %s %s", resp.Status, b)
		}
	}
}
