package proxy

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
)

// CI runs it for 60 s: go test ./proxy -run TestSoak -soak=60s
var soakFor = flag.Duration("soak", 0, "run the soak test for this long (0 skips it)")

// 200 concurrent clients mix plain, streaming and memory-loop requests
// against an upstream that fails at random. Every request must end in a
// complete reply or an error in the API's shape, every memory write the
// model was told succeeded must be on disk, and goroutines and heap must come
// back to where they started.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("soak test: run with -soak=60s")
	}
	h := newHarness(t)
	h.fake.SetOptions(fakeapi.Options{
		RecordLimit: -1,
		Faults:      &fakeapi.Faults{Rate: 0.1, Seed: 7, MaxDelay: 50 * time.Millisecond},
	})
	// A memory-loop request creates a file named by its first message.
	h.fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		first := gjson.GetBytes(r.Messages[0], "content").Str
		if name, ok := strings.CutPrefix(first, "mem:"); ok && r.AssistantTurns == 0 {
			return fakeapi.Blocks(fakeapi.Text("saving"), fakeapi.MemoryCreate("/memories/soak/"+name+".md", "body of "+name))
		}
		return fakeapi.TextReply("reply to " + first)
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()

	var total, ok200, apiErrors atomic.Int64
	var mu sync.Mutex
	var bad []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	deadline := time.Now().Add(*soakFor)
	var wg sync.WaitGroup
	for c := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for n := 0; time.Now().Before(deadline); n++ {
				kind := rng.IntN(3)
				content := fmt.Sprintf("c%d-%d", c, n)
				if kind == 2 {
					content = "mem:" + content
				}
				stream := rng.IntN(2) == 0
				body := `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"` + content + `"}]}`
				if stream {
					body = withStream(body)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL+"/v1/messages", strings.NewReader(body))
				req.Header.Set("X-Api-Key", keyAcme)
				req.Header.Set("Anthropic-Version", "2023-06-01")
				resp, err := client.Do(req)
				total.Add(1)
				if err != nil {
					cancel()
					fail("%s: transport error %v", content, err)
					continue
				}
				var buf strings.Builder
				_, rerr := ioCopy(&buf, resp)
				cancel()
				got := buf.String()
				switch {
				case rerr != nil:
					fail("%s: read error %v", content, rerr)
				case resp.StatusCode != 200:
					if gjson.Get(got, "type").Str != "error" || gjson.Get(got, "error.type").Str == "" {
						fail("%s: status %d without the API error shape: %.200s", content, resp.StatusCode, got)
					}
					apiErrors.Add(1)
				case stream:
					names := eventNames(got)
					if len(names) == 0 || names[0] != "message_start" {
						fail("%s: stream does not start with message_start: %.200s", content, got)
					} else if last := names[len(names)-1]; last == "error" {
						if !strings.Contains(got, `"type":"error","error":{"type":`) {
							fail("%s: error event not in the API's shape", content)
						}
						apiErrors.Add(1)
					} else if last != "message_stop" || !strings.HasSuffix(got, "\n\n") {
						fail("%s: stream ends with %s", content, last)
					} else {
						ok200.Add(1)
					}
				default:
					if gjson.Get(got, "type").Str != "message" || !strings.Contains(gjson.Get(got, "content").Raw, "reply to") {
						fail("%s: incomplete reply %.200s", content, got)
					}
					ok200.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, b := range bad {
		t.Error(b)
	}
	// Every write the model was told succeeded is on disk.
	acked := 0
	for _, r := range h.fake.Requests() {
		for _, m := range r.Messages {
			gjson.GetBytes(m, "content").ForEach(func(_, blk gjson.Result) bool {
				if p, ok := strings.CutPrefix(blk.Get("content").Str, "File created successfully at: /memories/"); ok && blk.Get("type").Str == "tool_result" {
					acked++
					name := strings.TrimSuffix(strings.TrimPrefix(p, "soak/"), ".md")
					if f, ok := h.memFile("acme", p); !ok || f != "body of "+name {
						t.Errorf("acknowledged write %s is not on disk (%q)", p, f)
					}
				}
				return true
			})
		}
	}
	t.Logf("%d requests: %d complete, %d API errors; %d acknowledged memory writes", total.Load(), ok200.Load(), apiErrors.Load(), acked)
	if ok200.Load() == 0 || acked == 0 {
		t.Fatal("the soak served nothing useful")
	}
	client.CloseIdleConnections()
	h.srv.up.client.CloseIdleConnections()
	settleGoroutines(t, g0)
	// Drop what the test itself recorded (the fake's requests, the observed
	// log lines) before measuring the heap.
	h.fake.Reset()
	h.logs.TakeAll()
	runtime.GC()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	if grow := int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc); grow > 64<<20 {
		t.Errorf("heap grew by %d MiB over the soak", grow>>20)
	}
}

func ioCopy(w *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	var n int64
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		w.Write(buf[:k])
		n += int64(k)
		if err != nil {
			if err.Error() == "EOF" {
				return n, nil
			}
			return n, err
		}
	}
}
