package tracing

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func envOf(m map[string]string) Getenv { return func(k string) string { return m[k] } }

// startRequest starts and ends a request's server span under an incoming
// traceparent (none when empty) and says whether it was sampled.
func startRequest(tr *Tracer, traceparent string) (sampled bool) {
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	if traceparent != "" {
		r.Header.Set("Traceparent", traceparent)
	}
	ctx, sp := tr.StartServer(r, "/v1/messages")
	sp.EndServer(200, "acme")
	return trace.SpanContextFromContext(ctx).IsSampled()
}

const (
	parentSampled    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	parentNotSampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
)

func TestSamplerFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name, sampler, arg                       string
		noParent, sampledParent, unsampledParent bool
	}{
		{"unset is parentbased_always_on", "", "", true, true, false},
		{"always_on samples every span", "always_on", "", true, true, true},
		{"always_off samples none", "always_off", "", false, false, false},
		{"parentbased_always_off follows a parent and drops a root", "parentbased_always_off", "", false, true, false},
		{"traceidratio 0 samples none", "traceidratio", "0", false, false, false},
		{"traceidratio without its argument samples all", "traceidratio", "", true, true, true},
		{"parentbased_traceidratio 0 follows a parent", "parentbased_traceidratio", "0", false, true, false},
		{"an unknown sampler is parentbased_always_on", "jaeger_remote", "", true, true, false},
		{"a ratio that does not parse is 1", "traceidratio", "half", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept := &keptRecords{}
			tr := newTracer(envOf(map[string]string{"OTEL_TRACES_SAMPLER": tc.sampler, "OTEL_TRACES_SAMPLER_ARG": tc.arg}), kept)
			got := [3]bool{startRequest(tr, ""), startRequest(tr, parentSampled), startRequest(tr, parentNotSampled)}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := [3]bool{tc.noParent, tc.sampledParent, tc.unsampledParent}
			if got != want {
				t.Errorf("sampled (no parent, sampled parent, unsampled parent) = %v, want %v", got, want)
			}
			n := 0
			for _, s := range want {
				if s {
					n++
				}
			}
			if len(kept.rs) != n {
				t.Errorf("%d spans exported, want the %d sampled", len(kept.rs), n)
			}
		})
	}
}

// A request's spans form one trace: the server span continues the client's,
// the chat span is its child, a memory command the chat span's.
func TestSpansFormOneTrace(t *testing.T) {
	kept := &keptRecords{}
	tr := newTracer(envOf(nil), kept)
	r := httptest.NewRequest("POST", "/v1/messages", nil)
	r.Header.Set("Traceparent", parentSampled)
	ctx, srv := tr.StartServer(r, "/v1/messages")
	cctx, chat := tr.StartChat(ctx, ChatRequest{Model: "m"})
	_, mem := tr.StartMemory(cctx, "view")
	mem.EndMemory(true, 1)
	chat.EndChat(ChatResponse{Status: 200})
	srv.EndServer(200, "acme")
	tr.Shutdown(context.Background())
	if len(kept.rs) != 3 {
		t.Fatalf("%d spans, want 3", len(kept.rs))
	}
	byName := map[string]*record{}
	for _, r := range kept.rs {
		byName[r.name] = r
	}
	s, c, m := byName["POST /v1/messages"], byName["chat m"], byName["memory view"]
	if s == nil || c == nil || m == nil {
		t.Fatalf("spans %v", byName)
	}
	if s.sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !s.parent.IsRemote() || s.parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("server span %v under %v: want the client's trace and parent", s.sc, s.parent)
	}
	if c.parent.SpanID() != s.sc.SpanID() || m.parent.SpanID() != c.sc.SpanID() || c.parent.IsRemote() {
		t.Errorf("chat's parent %v (server %v), memory's %v (chat %v)", c.parent.SpanID(), s.sc.SpanID(), m.parent.SpanID(), c.sc.SpanID())
	}
	if c.sc.TraceID() != s.sc.TraceID() || m.sc.TraceID() != s.sc.TraceID() || s.sc.SpanID() == c.sc.SpanID() {
		t.Error("the spans are not one trace of distinct spans")
	}
	if s.end.Before(s.start) || c.kind != trace.SpanKindClient || m.kind != trace.SpanKindInternal {
		t.Errorf("server %v–%v, kinds %v %v", s.start, s.end, c.kind, m.kind)
	}
}

// The headers written upstream are what OpenTelemetry's W3C propagator writes.
func TestTraceparentIsThePropagators(t *testing.T) {
	tr := newTracer(envOf(nil), &keptRecords{})
	defer tr.Shutdown(context.Background())
	ts, _ := trace.ParseTraceState("vendor=abc")
	for _, sc := range []trace.SpanContext{
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{0xff, 9}, TraceFlags: trace.FlagsSampled}),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab}, SpanID: trace.SpanID{7}, TraceFlags: 0xff, TraceState: ts}),
	} {
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		want := http.Header{}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(want))
		got := http.Header{}
		tr.Inject(ctx, got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Inject wrote %v, the propagator %v", got, want)
		}
	}
}

func TestKeepClientTrace(t *testing.T) {
	written := http.Header{"X-Api-Key": {"k"}, "Traceparent": {parentSampled}, "Tracestate": {"ours=1"}}
	t.Run("the client's headers come back", func(t *testing.T) {
		h := written.Clone()
		KeepClientTrace(h, http.Header{"Traceparent": {parentNotSampled}, "Tracestate": {"vendor=abc"}})
		if h.Get("Traceparent") != parentNotSampled || h.Get("Tracestate") != "vendor=abc" || h.Get("X-Api-Key") != "k" {
			t.Errorf("got %v", h)
		}
	})
	t.Run("a client that sent none gets none", func(t *testing.T) {
		h := written.Clone()
		KeepClientTrace(h, http.Header{})
		if _, ok := h["Traceparent"]; ok || h.Get("Tracestate") != "" || h.Get("X-Api-Key") != "k" {
			t.Errorf("got %v", h)
		}
	})
}

// Attributes leave as the SDK would keep them: a key set twice keeps its
// last value, and OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT and
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT bound what a span carries.
func TestAttributesAtExport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    []attribute.KeyValue
		dropped int
	}{
		{"a key set twice keeps its last value, in its first place", nil, []attribute.KeyValue{
			attribute.String(AttrMemoryCommand, "view"), attribute.String("a", "héllo wörld"), attribute.StringSlice("s", []string{"abcdef", "é"}),
			attribute.Int("n", 2)}, 0},
		// As the SDK counts: each setting of a key past the limit is one dropped.
		{"the count limit keeps the first keys and updates them", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "2"}, []attribute.KeyValue{
			attribute.String(AttrMemoryCommand, "view"), attribute.String("a", "héllo wörld")}, 3},
		{"the general count limit applies when the span's is unset", map[string]string{"OTEL_ATTRIBUTE_COUNT_LIMIT": "1"}, []attribute.KeyValue{
			attribute.String(AttrMemoryCommand, "view")}, 5},
		{"the value length limit cuts strings by characters", map[string]string{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "3"}, []attribute.KeyValue{
			attribute.String(AttrMemoryCommand, "vie"), attribute.String("a", "hél"), attribute.StringSlice("s", []string{"abc", "é"}),
			attribute.Int("n", 2)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept := &keptRecords{}
			tr := newTracer(envOf(tc.env), kept)
			_, sp := tr.StartMemory(context.Background(), "view")
			sp.Set(attribute.String("a", "first"), attribute.StringSlice("s", []string{"abcdef", "é"}), attribute.Int("n", 1))
			sp.Set(attribute.String("a", "héllo wörld"), attribute.Int("n", 2))
			sp.End()
			sp.Set(attribute.Int("after", 1)) // ended: ignored
			tr.Shutdown(context.Background())
			if len(kept.rs) != 1 {
				t.Fatalf("%d spans", len(kept.rs))
			}
			r := kept.rs[0]
			if got := decodeAttrs(r.attrs); fmt.Sprint(got) != fmt.Sprint(tc.want) || r.dropped != tc.dropped {
				t.Errorf("attributes %v, %d dropped; want %v, %d", got, r.dropped, tc.want, tc.dropped)
			}
		})
	}
}

// blockingExporter holds each export until release is closed.
type blockingExporter struct {
	keptRecords
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingExporter) export(ctx context.Context, bt batch) error {
	b.once.Do(func() { close(b.started) })
	<-b.release
	return b.keptRecords.export(ctx, bt)
}

func TestBatcher(t *testing.T) {
	t.Run("a full batch is exported without waiting for the schedule", func(t *testing.T) {
		exp := &blockingExporter{started: make(chan struct{}), release: make(chan struct{})}
		close(exp.release)
		tr := newTracer(envOf(map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2"}), exp)
		defer tr.Shutdown(context.Background())
		startRequest(tr, "")
		startRequest(tr, "")
		<-exp.started // never, were the batch to wait an hour for its schedule
	})
	t.Run("a batch not full is exported on the schedule, without a flush", func(t *testing.T) {
		exp := &blockingExporter{started: make(chan struct{}), release: make(chan struct{})}
		close(exp.release)
		tr := newTracer(envOf(map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "1"}), exp)
		defer tr.Shutdown(context.Background())
		startRequest(tr, "")
		<-exp.started // never, were the schedule not to take the batch being filled
	})
	t.Run("spans beyond the queue's size are dropped while an export is slow, and the rest are exported", func(t *testing.T) {
		exp := &blockingExporter{started: make(chan struct{}), release: make(chan struct{})}
		tr := newTracer(envOf(map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1"}), exp)
		startRequest(tr, "")
		<-exp.started // the first span's export holds the goroutine
		for range 10 {
			startRequest(tr, "")
		}
		close(exp.release)
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(exp.rs); n != 1+4 {
			t.Errorf("%d spans exported, want 5: the first and a full queue of 4", n)
		}
		startRequest(tr, "") // after Shutdown: dropped, not a panic
	})
	t.Run("Flush exports what has ended and Shutdown what is left", func(t *testing.T) {
		kept := &keptRecords{}
		tr := newTracer(envOf(nil), kept)
		startRequest(tr, "")
		if err := tr.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		kept.mu.Lock()
		n := len(kept.rs)
		kept.mu.Unlock()
		if n != 1 {
			t.Errorf("after Flush %d spans exported, want 1", n)
		}
		startRequest(tr, "")
		tr.Shutdown(context.Background())
		if len(kept.rs) != 2 {
			t.Errorf("after Shutdown %d spans exported, want 2", len(kept.rs))
		}
	})
}

// A record is reused once its span ends: a Span kept past its End must not
// reach the span that reuses it.
func TestASpanEndedTouchesNothing(t *testing.T) {
	kept := &keptRecords{}
	tr := newTracer(envOf(nil), kept)
	_, a := tr.StartMemory(context.Background(), "view")
	a.End()
	for range 3 { // whichever record the pool hands out
		_, b := tr.StartMemory(context.Background(), "create")
		a.Set(attribute.String("stale", "x"))
		a.Fail("stale", "x")
		if a.Recording() {
			t.Error("an ended span says it records")
		}
		a.End()
		b.EndMemory(true, 1)
	}
	tr.Shutdown(context.Background())
	if len(kept.rs) != 4 {
		t.Fatalf("%d spans exported, want 4", len(kept.rs))
	}
	for _, r := range kept.rs[1:] {
		if r.name != "memory create" || r.status.Code != 0 || fmt.Sprint(decodeAttrs(r.attrs)) != fmt.Sprint([]attribute.KeyValue{
			attribute.String(AttrMemoryCommand, "create"), attribute.String(AttrMemoryResult, "ok"), attribute.Int(AttrMemoryBytes, 1)}) {
			t.Errorf("span %s: %v, status %v", r.name, decodeAttrs(r.attrs), r.status)
		}
	}
}

// A span's attributes against a map: keys that share the filter's bit stay
// apart, a key set again keeps its place and takes its last value (whatever
// its length), an empty key is dropped and counted, empty values are kept.
func TestAttributesKeepTheLastValueOfEachKey(t *testing.T) {
	keys := []attribute.Key{"ab", "cb", "xb", "a", "b", "abc", "abd", "gen_ai.request.model", "gen_ai.response.model", ""}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var kv []attribute.KeyValue
		for i := range rng.IntN(40) {
			k := string(keys[rng.IntN(len(keys))])
			switch rng.IntN(4) {
			case 0:
				kv = append(kv, attribute.Int(k, i*1000*rng.IntN(1000)))
			case 1:
				kv = append(kv, attribute.String(k, strings.Repeat("v", rng.IntN(300))))
			case 2:
				kv = append(kv, attribute.KeyValue{Key: attribute.Key(k)})
			default:
				kv = append(kv, attribute.StringSlice(k, []string{"x", strings.Repeat("y", rng.IntN(3))}))
			}
		}
		var want []attribute.KeyValue
		at := map[attribute.Key]int{}
		dropped := 0
		for _, a := range kv {
			if a.Key == "" {
				dropped++
				continue
			}
			if i, ok := at[a.Key]; ok {
				want[i] = a
				continue
			}
			at[a.Key] = len(want)
			want = append(want, a)
		}
		r := &record{t: &Tracer{limits: spanLimits{count: 128, valueLength: -1}}}
		r.ents = r.arr[:0]
		r.add(kv...)
		if got := decodeAttrs(r.attrs); fmt.Sprint(got) != fmt.Sprint(want) || r.dropped != dropped {
			t.Fatalf("attributes of %v:\n%v, %d dropped\nwant\n%v, %d", kv, got, r.dropped, want, dropped)
		}
	}
}

func TestValidUTF8(t *testing.T) {
	for _, s := range []string{"", "a", "gen_ai.usage.cache_creation.input_tokens", "héllo wörld, and more than eight bytes",
		"\xffabcdefgh", "abcdefg\xff", "abcdefgh\xff", "abcdefghijklmno\xe9", "abcdefghijklmnop\xe9", "caf\xe9", "日本語のテキスト"} {
		if got, want := validUTF8(s), strings.ToValidUTF8(s, "\uFFFD"); got != want {
			t.Errorf("validUTF8(%q) = %q, want %q", s, got, want)
		}
	}
}

// setStrings writes what setting an attribute.StringSlice writes.
func TestSetStringsIsAStringSlice(t *testing.T) {
	long := strings.Repeat("é", 100)
	for _, limit := range []int{-1, 0, 3, 200} {
		for _, ss := range [][]string{nil, {}, {""}, {"end_turn"}, {"a", long, "x\xffy", "日本語"}, {strings.Repeat("z", 300)}} {
			lim := spanLimits{count: 128, valueLength: limit}
			a := &record{t: &Tracer{limits: lim}}
			a.ents = a.arr[:0]
			a.setStrings("k", ss)
			b := &record{t: &Tracer{limits: lim}}
			b.ents = b.arr[:0]
			b.add(attribute.StringSlice("k", ss))
			if !bytes.Equal(a.attrs, b.attrs) {
				t.Errorf("limit %d, %q: setStrings wrote %x, a StringSlice %x", limit, ss, a.attrs, b.attrs)
			}
		}
	}
}

// Spans ended from many goroutines at once, while batches fill, are exported
// and flushed, each exactly once and whole (run with -race).
func TestConcurrentSpansAreExportedOnce(t *testing.T) {
	kept := &keptRecords{}
	tr := newTracer(envOf(map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "7", "OTEL_BSP_MAX_QUEUE_SIZE": "100000"}), kept)
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, sp := tr.StartMemory(context.Background(), "view")
				sp.Set(attribute.Int("worker", w), attribute.Int("i", i))
				sp.EndMemory(true, i)
				if i%50 == 0 {
					tr.Flush(context.Background())
				}
			}
		}()
	}
	wg.Wait()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range kept.rs {
		kv := decodeAttrs(r.attrs)
		id := fmt.Sprint(kv)
		if len(kv) != 5 || seen[id] || r.name != "memory view" {
			t.Fatalf("span %s %v (seen before: %v)", r.name, kv, seen[id])
		}
		seen[id] = true
	}
	if len(seen) != workers*each {
		t.Errorf("%d spans exported, want %d", len(seen), workers*each)
	}
}
