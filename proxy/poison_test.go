package proxy

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ctxproxy/ctxproxy/tokens"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// Every test of this package runs with released body buffers poisoned
// (PoisonPooledBuffers): a string kept from a pooled body reads the poison
// as soon as its request is over, not another request's bytes now and then
// under load. Benchmarks measure the path as it runs in production.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		PoisonPooledBuffers(true)
	}
	os.Exit(m.Run())
}

func TestReleasedBodyBufferIsPoisoned(t *testing.T) {
	buf, lease := newBodyBuf(100 << 10)
	if lease == nil {
		t.Fatal("a 100 KiB body is not pooled")
	}
	copy(buf, `{"model":"claude-opus-4-1"}`)
	model := buf[10:25]
	lease.release()
	if want := poisonPattern[10:25]; string(model) != want {
		t.Fatalf("a view into the released buffer reads %q, want the poison %q", model, want)
	}
	whole := buf[:cap(buf)]
	if strings.Trim(string(whole), poisonPattern) != "" {
		t.Fatal("the released buffer is not poison throughout")
	}
}

// capturedLedger keeps the calls themselves, strings and all, as the
// Recorder handed them over: a string that points into a body buffer shows
// the poison when the test reads it.
type capturedLedger struct {
	mu    sync.Mutex
	calls []tokens.Call
}

func (l *capturedLedger) Append(_ context.Context, c tokens.Call) error {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return nil
}

func (l *capturedLedger) AppendBatch(ctx context.Context, cs []tokens.Call) (int, error) {
	for _, c := range cs {
		l.Append(ctx, c)
	}
	return len(cs), nil
}

func (l *capturedLedger) Query(context.Context, tokens.Filter) ([]tokens.Call, error) {
	return nil, nil
}
func (l *capturedLedger) Close() error { return nil }

// keptSpans keeps its spans past the tracer's shutdown (which flushes them).
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }

// Concurrent pooled-size requests, each naming its own model and user: once
// every request is over (each body buffer back in its pool, poisoned), every
// ledger line, chat span and request log line still names its request's
// model, as many times as that model was sent.
func TestNothingKeptPointsIntoAPooledBody(t *testing.T) {
	const (
		models   = 6
		requests = 18
	)
	ledger := &capturedLedger{}
	rec := tokens.NewRecorder(nil, nil, ledger, nil)
	exp := keptSpans{tracetest.NewInMemoryExporter()}
	tr := tracing.WithExporter(exp)
	h := newHarness(t, func(c *Config) { c.Recorder, c.Tracer = rec, tr })
	model := func(i int) string { return fmt.Sprintf("claude-poison-test-%02d", i%models) }
	filler := strings.Repeat("x", minPooledBody) // past minPooledBody: the body is read into a pooled buffer
	var wg sync.WaitGroup
	errs := make(chan string, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, stream := "/v1/messages", ""
			switch i % 3 {
			case 1:
				stream = `"stream":true,`
			case 2:
				path = "/v1/messages/count_tokens"
			}
			key := keyOther // the default tenant: no memory loop, the body goes up as read
			if i%2 == 1 {
				key = keyAcme // memory proxy: the loop builds its body from the client's
			}
			body := `{"model":"` + model(i) + `","max_tokens":16,` + stream + `"metadata":{"user_id":"user-` + fmt.Sprint(i) + `"},` +
				`"messages":[{"role":"user","content":"` + filler + `"}]}`
			resp := h.post(path, key, body)
			if b := readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
				errs <- fmt.Sprintf("request %d: status %d %.300s", i, resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	h.proxy.Close() // waits for every handler: each body buffer is back in its pool
	if err := rec.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	want := map[string]int{}
	for i := range requests {
		want[model(i)]++
	}
	check := func(what string, got map[string]int) {
		t.Helper()
		for m, n := range got {
			if want[m] != n {
				t.Errorf("%s: %d with model %q, want %d", what, n, m, want[m])
			}
		}
		for m, n := range want {
			if got[m] == 0 {
				t.Errorf("%s: none with model %q, want %d", what, m, n)
			}
		}
	}
	ledgerModels := map[string]int{}
	for _, c := range ledger.calls {
		ledgerModels[c.Model]++
	}
	check("ledger lines", ledgerModels)

	spanModels := map[string]int{}
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if a.Key == tracing.AttrRequestModel {
				spanModels[a.Value.AsString()]++
			}
		}
	}
	check("chat spans", spanModels)

	logModels := map[string]int{}
	for _, e := range h.logs.FilterMessage("request").All() {
		logModels[fmt.Sprint(e.ContextMap()["model"])]++
	}
	check("request log lines", logModels)
}
