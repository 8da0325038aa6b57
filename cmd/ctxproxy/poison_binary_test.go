package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/proxy"
)

// The proxies this package's tests run in-process (the demo's, serve's)
// poison released body buffers too.
func init() { proxy.PoisonPooledBuffers(true) }

// Many large requests at once, each naming one of many models: every
// ledger line names the model its request sent, as many times as it was
// sent, while the pooled body buffers they were read into are poisoned as
// soon as each request is over (--debug-poison-buffers), with the
// ledger's writer batching its lines behind the requests. Plain, streamed
// and count_tokens requests, for a tenant with the proxy's memory loop and
// one without; read whole first, and forwarded while they arrive.
func TestBinaryLedgerModelsSurviveReusedBodyBuffers(t *testing.T) {
	const (
		models   = 40
		size     = 300 << 10 // pooled, and long enough to be forwarded while it arrives
		inFlight = 24        // at once: enough to keep the ledger's writer batching
	)
	for _, mode := range []struct {
		name     string
		requests int
		args     []string
	}{
		{"read whole", 3 * models, nil},
		{"forwarded while reading", models, []string{"--forward-while-reading"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			requests := mode.requests
			_, upURL := fakeUpstream(t)
			dir := t.TempDir()
			ledger := filepath.Join(dir, "ledger.jsonl")
			p := startProxy(t, append([]string{"--upstream", upURL, "--policies", binPolicies(t), "--memory-dir", filepath.Join(dir, "mem"),
				"--ledger", "file:" + ledger, "--debug-poison-buffers"}, mode.args...)...)
			if !strings.Contains(p.Log(), "--debug-poison-buffers") {
				t.Fatalf("no word of the poisoning in the log:\n%s", p.Log())
			}
			model := func(i int) string {
				return fmt.Sprintf("claude-alias-%02d-%s", i%models, strings.Repeat("m", i%models))
			}
			filler := strings.Repeat("lorem ipsum ", size/12)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inFlight}}
			defer client.CloseIdleConnections()
			var wg sync.WaitGroup
			errs := make(chan string, requests)
			slots := make(chan struct{}, inFlight)
			for i := range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots <- struct{}{}
					defer func() { <-slots }()
					path, stream := "/v1/messages", ""
					switch i % 3 {
					case 1:
						stream = `"stream":true,`
					case 2:
						path = "/v1/messages/count_tokens"
					}
					key := binKey // acme: memory run by the proxy
					if i%2 == 1 {
						key = "sk-ant-nobody-in-particular" // the default tenant: memory off
					}
					body := `{"model":"` + model(i) + `","max_tokens":16,` + stream + `"metadata":{"user_id":"u-` + fmt.Sprint(i) + `"},` +
						`"messages":[{"role":"user","content":"` + filler + `"}]}`
					req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr+path, strings.NewReader(body))
					req.Header.Set("X-Api-Key", key)
					req.Header.Set("Anthropic-Version", "2023-06-01")
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						errs <- fmt.Sprintf("request %d: %v", i, err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						errs <- fmt.Sprintf("request %d: status %d %.300s", i, resp.StatusCode, b)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			if t.Failed() {
				for _, l := range strings.Split(p.Log(), "\n") {
					if !strings.Contains(l, `"status":200`) {
						t.Log(l)
					}
				}
			}
			// A stop writes what the ledger's writer still holds.
			p.Signal(syscall.SIGTERM)
			<-p.Done()

			want := map[string]int{}
			for i := range requests {
				want[model(i)]++
			}
			got := map[string]int{}
			f, err := os.Open(ledger)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				m := gjson.GetBytes(sc.Bytes(), "model")
				got[m.String()]++
				if want[m.String()] == 0 {
					t.Errorf("a ledger line names a model no request sent: %.300s", sc.Bytes())
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			for m, n := range want {
				if got[m] != n {
					t.Errorf("%d ledger lines name %s, want %d", got[m], m, n)
				}
			}
		})
	}
}
