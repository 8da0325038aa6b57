package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.UTC)

func sampleCalls() []Call {
	return []Call{
		{Time: t0, Tenant: "acme", KeyID: "0a1b2c3d", User: "ana@example.com", Model: "claude-sonnet-4-5-20250929", RequestID: "req_1", MessageID: "msg_1", Status: 200,
			Usage: Usage{InputTokens: 1000, OutputTokens: 200, CacheCreationInputTokens: 30, CacheReadInputTokens: 4000},
			Edits: []AppliedEdit{{Type: EditClearThinking, ClearedThinkingTurns: 2, ClearedInputTokens: 1800}, {Type: EditClearToolUses, ClearedToolUses: 8, ClearedInputTokens: 50000}},
			Cost:  3_000_000 + 3_000_000 + 112_500 + 1_200_000,
			// cleared 51,800 at the read price $0.30/MTok, less 2,000 missed tokens re-written at $3.75 − $0.30
			SavingsGross: 15_540_000, CachePenalty: 6_900_000, Savings: 8_640_000,
			CacheMissedInputTokens: 2000, CacheMissCause: CauseEdits, CacheEffect: CacheMeasured},
		{Time: t0.Add(time.Hour), Tenant: "acme", KeyID: "ffee0011", Model: "claude-opus-4-8", RequestID: "req_2", Stream: true, Status: 200,
			Usage:       Usage{InputTokens: 10, OutputTokens: 20, CacheCreationInputTokens: 300, CacheCreation1hInputTokens: 100},
			Edits:       []AppliedEdit{{Type: "compact_20260112", ClearedInputTokens: 9, Raw: `{"type":"compact_20260112","cleared_input_tokens":9,"note":"x"}`}},
			CacheEffect: CacheUnknown, CacheMissedInputTokens: 40, CacheMissCause: CauseExpiry},
		{Time: t0.Add(25 * time.Hour), Tenant: "beta", Model: "gpt-4o", RequestID: "req_3", Status: 529, PriceUnknown: true, CacheEffect: CacheNone},
		{Time: t0.Add(25*time.Hour + time.Minute), Tenant: "beta", Model: "claude-opus-4-8", RequestID: "req_cut", Stream: true, Status: 200,
			Usage: Usage{InputTokens: 12, OutputTokens: 4096}, Cost: 102_460_000, Cut: true, CacheEffect: CacheNone},
		{Time: t0.Add(26 * time.Hour), Tenant: "beta", Model: "claude-opus-4-6", RequestID: "req_4", Status: 200, ServiceTier: "batch",
			BatchID: "msgbatch_1", CustomID: "req-7",
			Usage: Usage{InputTokens: 3000, OutputTokens: 300, CacheCreationInputTokens: 50, CacheCreation1hInputTokens: 20, WebSearchRequests: 2},
			Iterations: []Iteration{
				{Type: IterationCompaction, Usage: Usage{InputTokens: 2000, OutputTokens: 100}, Cost: 7_500_000},
				{Type: IterationFallbackMessage, Model: "claude-opus-4-8", Usage: Usage{InputTokens: 1000, OutputTokens: 200, CacheCreationInputTokens: 50, CacheCreation1hInputTokens: 20}, Cost: 5_087_500},
			},
			Breakdown:   CostBreakdown{Input: 15_000_000, Output: 7_500_000, CacheWrite5m: 187_500, CacheWrite1h: 200_000, WebSearch: 20_000_000, BatchDiscount: -11_443_750},
			Cost:        31_443_750,
			Compactions: 1, CompactionCost: 7_500_000, CacheEffect: CacheNone},
		// count_tokens calls: with and without original_input_tokens
		{Time: t0.Add(30 * time.Hour), Tenant: "acme", Model: "claude-opus-4-8", RequestID: "req_5", Status: 200,
			CountTokens: &CountTokens{InputTokens: 25000, OriginalInputTokens: 70000, HasOriginal: true}},
		{Time: t0.Add(31 * time.Hour), Tenant: "acme", Model: "claude-opus-4-8", RequestID: "req_6", Status: 200,
			CountTokens: &CountTokens{InputTokens: 12}},
		// a call of a tracked conversation, and a policy-lab measurement of it
		{Time: t0.Add(40 * time.Hour), Tenant: "acme", Model: "claude-opus-4-8", RequestID: "req_7", MessageID: "msg_7", Status: 200,
			Usage: Usage{InputTokens: 100, OutputTokens: 10}, Cost: 750_000, Savings: 0, CacheEffect: CacheNone, Conversation: "msg_1"},
		{Time: t0.Add(40*time.Hour + time.Second), Tenant: "acme", KeyID: "0a1b2c3d", Model: "claude-opus-4-8", RequestID: "req_8", Status: 200,
			Shadow: &Shadow{Name: "keep-5", Shadows: "req_7", InputTokens: 80, OriginalInputTokens: 100,
				EstimatedCost: 650_000, EstimatedSavings: 100_000, NewClearingPoint: true, CompactNotMeasured: true}},
	}
}

func TestMarshalCallLine(t *testing.T) {
	c := sampleCalls()[0]
	b, err := MarshalCall(&c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"time":"2026-03-01T10:00:00.123456789Z","tenant":"acme","key_id":"0a1b2c3d","user":"ana@example.com","model":"claude-sonnet-4-5-20250929","request_id":"req_1","message_id":"msg_1","stream":false,"status":200,` +
		`"usage":{"input_tokens":1000,"output_tokens":200,"cache_creation_input_tokens":30,"cache_read_input_tokens":4000},` +
		`"applied_edits":[{"type":"clear_thinking_20251015","cleared_thinking_turns":2,"cleared_input_tokens":1800},{"type":"clear_tool_uses_20250919","cleared_tool_uses":8,"cleared_input_tokens":50000}],` +
		`"cleared_input_tokens":51800,"cost_usd":0.0073125,"savings_usd":0.00864,"savings_gross_usd":0.01554,"cache_penalty_usd":0.0069,` +
		`"cache_missed_input_tokens":2000,"cache_effect":"measured","cache_miss_cause":"edits","price_unknown":false}`
	if string(b) != want {
		t.Errorf("line =\n%s\nwant\n%s", b, want)
	}
	back, err := UnmarshalCall(b)
	if err != nil || !reflect.DeepEqual(back, c) {
		t.Errorf("round trip = %+v (%v)", back, err)
	}
	t.Run("a count_tokens call keeps the count in the API's shape, billed nothing", func(t *testing.T) {
		for i, want := range []string{
			`"price_unknown":false,"endpoint":"count_tokens","count_tokens":{"input_tokens":25000,"context_management":{"original_input_tokens":70000}}}`,
			`"price_unknown":false,"endpoint":"count_tokens","count_tokens":{"input_tokens":12,"context_management":null}}`,
		} {
			c := sampleCalls()[5+i]
			b, _ := MarshalCall(&c)
			if !strings.HasSuffix(string(b), want) {
				t.Errorf("line %s\nwant suffix %s", b, want)
			}
			back, err := UnmarshalCall(b)
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Errorf("round trip = %+v (%v)", back, err)
			}
		}
	})
	t.Run("a stream the client cut says so", func(t *testing.T) {
		c := sampleCalls()[3]
		b, _ := MarshalCall(&c)
		if !strings.HasSuffix(string(b), `"price_unknown":false,"cut":true}`) {
			t.Errorf("line %s", b)
		}
		if back, err := UnmarshalCall(b); err != nil || !back.Cut {
			t.Errorf("round trip = %+v (%v)", back, err)
		}
	})
	if _, err := UnmarshalCall([]byte(`{"v":2,"time":"2026-01-01T00:00:00Z"}`)); err == nil {
		t.Error("a newer record version was accepted")
	}
}

func ledgerSuite(t *testing.T, open func(t *testing.T) Ledger, reopen func(t *testing.T) Ledger, timePrec time.Duration) {
	ctx := context.Background()
	t.Run("appended calls come back in order, exactly", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		in := sampleCalls()
		for _, c := range in {
			if err := l.Append(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		got, err := l.Query(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		assertCallsPrec(t, timePrec, got, in)
	})
	t.Run("a batch is stored in one go, in order, exactly as appended one by one", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		bl, ok := l.(BatchLedger)
		if !ok {
			t.Fatalf("%T does not batch", l)
		}
		in := sampleCalls()
		if n, err := bl.AppendBatch(ctx, in[:1]); err != nil || n != 1 {
			t.Fatalf("AppendBatch of one: %d %v", n, err)
		}
		if n, err := bl.AppendBatch(ctx, in[1:]); err != nil || n != len(in)-1 {
			t.Fatalf("AppendBatch of %d: %d %v", len(in)-1, n, err)
		}
		got, err := l.Query(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		assertCallsPrec(t, timePrec, got, in)
	})
	t.Run("filter by tenant and time range (since inclusive, until exclusive)", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		in := sampleCalls()
		for _, c := range in {
			if err := l.Append(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		got, err := l.Query(ctx, Filter{Tenant: "acme", Since: t0.Add(time.Hour), Until: t0.Add(26 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		assertCallsPrec(t, timePrec, got, in[1:2])
		got, err = l.Query(ctx, Filter{Until: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		assertCallsPrec(t, timePrec, got, in[:1])
		got, err = l.Query(ctx, Filter{Tenant: "nobody"})
		if err != nil || len(got) != 0 {
			t.Fatalf("nobody: %v %v", got, err)
		}
	})
	t.Run("records survive closing and reopening", func(t *testing.T) {
		l := open(t)
		in := sampleCalls()
		for _, c := range in[:2] {
			if err := l.Append(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = reopen(t)
		defer l.Close()
		for _, c := range in[2:] {
			if err := l.Append(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		got, err := l.Query(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		assertCallsPrec(t, timePrec, got, in)
	})
	t.Run("concurrent appends all land", func(t *testing.T) {
		l := open(t)
		defer l.Close()
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 25; j++ {
					if err := l.Append(ctx, Call{Time: t0, Tenant: "c", Model: "m", Usage: Usage{InputTokens: 1}}); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		got, err := l.Query(ctx, Filter{Tenant: "c"})
		if err != nil || len(got) != 200 {
			t.Fatalf("got %d calls, err %v", len(got), err)
		}
	})
}

func assertCalls(t *testing.T, got, want []Call) {
	t.Helper()
	assertCallsPrec(t, time.Nanosecond, got, want)
}

func assertCallsPrec(t *testing.T, prec time.Duration, got, want []Call) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d calls, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		w := want[i]
		g := got[i]
		if !g.Time.Equal(w.Time.Truncate(prec)) {
			t.Errorf("call %d time %v, want %v", i, g.Time, w.Time)
		}
		g.Time, w.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("call %d =\n %+v\nwant\n %+v", i, g, w)
		}
	}
}

func TestFileLedger(t *testing.T) {
	var path string
	ledgerSuite(t,
		func(t *testing.T) Ledger {
			path = filepath.Join(t.TempDir(), "sub", "ledger.jsonl")
			l, err := OpenLedger(context.Background(), "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		func(t *testing.T) Ledger {
			l, err := OpenLedger(context.Background(), "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, time.Nanosecond)
}

func TestFileLedgerRecoversFromPartialLines(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	in := sampleCalls()
	l, err := OpenFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, in[0]); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// A crash (or a full disk) left half a record at the end.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"v":1,"time":"2026-03-01T1`)
	f.Close()

	l, err = OpenFileLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Query(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	assertCalls(t, got, in[:1]) // the partial tail is not read as a record
	if err := l.Append(ctx, in[1]); err != nil {
		t.Fatal(err)
	}
	got, err = l.Query(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	assertCalls(t, got, in[:2]) // the next record started on its own line
	if l.Skipped() != 1 {
		t.Errorf("skipped = %d, want the 1 broken line", l.Skipped())
	}
}

func TestOpenLedgerSpecs(t *testing.T) {
	for _, spec := range []string{"", "file:", "mysql://x", "./data/ledger.jsonl"} {
		if l, err := OpenLedger(context.Background(), spec); err == nil {
			l.Close()
			t.Errorf("spec %q accepted", spec)
		}
	}
	dir := t.TempDir()
	l, err := OpenLedger(context.Background(), "file://"+dir+"/x.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := os.Stat(filepath.Join(dir, "x.jsonl")); err != nil {
		t.Error("file:// spec did not create the file")
	}
}

func TestRecorderWritesLedgerAndMetrics(t *testing.T) {
	ctx := context.Background()
	p := shippedPrices(t)
	m := NewMetrics([]string{"acme"}, p.Models())
	l, err := OpenFileLedger(filepath.Join(t.TempDir(), "l.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := NewRecorder(p, m, l, zap.NewNop())
	got := r.Record(ctx, Call{Tenant: "acme", Model: "claude-opus-4-8", Status: 200, Usage: Usage{InputTokens: 1_000_000},
		Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 1, ClearedInputTokens: 200_000}}})
	if got.Cost.String() != "5.00" || got.Savings.String() != "1.00" || got.Time.IsZero() {
		t.Errorf("priced call: %+v", got)
	}
	r.Record(ctx, Call{Tenant: "acme", Model: "unknown-model", Status: 200, Usage: Usage{InputTokens: 1}})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	calls, err := l.Query(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].Cost != got.Cost || !calls[1].PriceUnknown {
		t.Fatalf("ledger = %+v", calls)
	}
	if v := testutil.ToFloat64(m.cost.WithLabelValues("acme", "claude-opus-4-8")); v != 5 {
		t.Errorf("cost metric %v", v)
	}
	// After Close, records are dropped (counted), not panicking on a closed queue.
	r.Record(ctx, Call{Tenant: "acme"})
	if r.Dropped() != 1 || testutil.ToFloat64(m.ledgerDropped) != 1 {
		t.Errorf("dropped = %d", r.Dropped())
	}
}

func TestRecorderFullDiskIsReportedNotFatal(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	ctx := context.Background()
	l, err := OpenLedger(ctx, "file:/dev/full")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(ctx, sampleCalls()[0]); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("append to /dev/full: %v", err)
	}
	core, logs := observer.New(zap.InfoLevel)
	m := NewMetrics(nil, nil)
	r := NewRecorder(shippedPrices(t), m, l, zap.New(core))
	for i := 0; i < 3; i++ {
		c := r.Record(ctx, Call{Tenant: "acme", Model: "claude-opus-4-8", Usage: Usage{InputTokens: 10}})
		if c.Cost != 50_000 {
			t.Fatalf("call not priced while the disk is full: %+v", c)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Failed() != 3 || testutil.ToFloat64(m.ledgerErrors) != 3 {
		t.Errorf("failed = %d, metric %v", r.Failed(), testutil.ToFloat64(m.ledgerErrors))
	}
	if n := logs.FilterMessage("ledger write failed").Len(); n != 3 {
		t.Errorf("logged %d write failures", n)
	}
	if got, err := l.Query(ctx, Filter{}); err != nil || len(got) != 0 {
		t.Errorf("query of /dev/full: %v %v", got, err)
	}
}

// blockingLedger blocks every Append until released, to fill the queue.
type blockingLedger struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (b *blockingLedger) Append(ctx context.Context, c Call) error {
	<-b.release
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
	return nil
}
func (b *blockingLedger) Query(context.Context, Filter) ([]Call, error) { return nil, nil }
func (b *blockingLedger) Close() error                                  { return nil }

func TestRecorderDropsWhenQueueFull(t *testing.T) {
	ctx := context.Background()
	bl := &blockingLedger{release: make(chan struct{})}
	core, logs := observer.New(zap.WarnLevel)
	m := NewMetrics(nil, nil)
	r := NewRecorder(nil, m, bl, zap.New(core), WithQueueSize(2))
	// One record may sit in the writer, two in the queue; the rest are dropped at once.
	for i := 0; i < 10; i++ {
		r.Record(ctx, Call{Tenant: "t"})
	}
	close(bl.release)
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	written := bl.n
	if written+int(r.Dropped()) != 10 || r.Dropped() < 7 {
		t.Errorf("written %d dropped %d", written, r.Dropped())
	}
	if testutil.ToFloat64(m.ledgerDropped) != float64(r.Dropped()) {
		t.Error("drop metric disagrees")
	}
	if logs.FilterMessage("ledger record dropped").Len() != 1 {
		t.Errorf("drop logs: %d (want the first only)", logs.Len())
	}
}

func TestRecorderCloseGivesUpWithContext(t *testing.T) {
	bl := &blockingLedger{release: make(chan struct{})}
	r := NewRecorder(nil, nil, bl, nil)
	r.Record(context.Background(), Call{})
	r.Record(context.Background(), Call{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Close(ctx); err == nil {
		t.Error("Close returned nil while records were pending")
	}
	close(bl.release)
}

// gateLedger is a BatchLedger whose first AppendBatch says it has begun and waits to be let go.
type gateLedger struct {
	discardLedger
	entered, release chan struct{}
	batches          [][]Call
}

func (g *gateLedger) AppendBatch(ctx context.Context, cs []Call) (int, error) {
	if g.batches == nil {
		close(g.entered)
		<-g.release
	}
	g.batches = append(g.batches, append([]Call(nil), cs...))
	return len(cs), nil
}

func TestRecorderWritesWhatQueuedWhileTheLedgerWasBusyInOneBatch(t *testing.T) {
	ctx := context.Background()
	g := &gateLedger{entered: make(chan struct{}), release: make(chan struct{})}
	r := NewRecorder(nil, nil, g, nil)
	r.Record(ctx, Call{RequestID: "req_0"})
	<-g.entered // the writer holds req_0 in a write
	for i := 1; i <= 5; i++ {
		r.Record(ctx, Call{RequestID: fmt.Sprintf("req_%d", i)})
	}
	close(g.release)
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(g.batches) != 2 || len(g.batches[0]) != 1 || len(g.batches[1]) != 5 {
		t.Fatalf("batches %v, want [req_0] then the 5 queued meanwhile", g.batches)
	}
	for i, c := range g.batches[1] {
		if want := fmt.Sprintf("req_%d", i+1); c.RequestID != want {
			t.Errorf("batch record %d is %s, want %s", i, c.RequestID, want)
		}
	}
}

// batchCounter is a BatchLedger that keeps each batch it is handed.
type batchCounter struct {
	discardLedger
	mu      sync.Mutex
	batches [][]Call
}

func (b *batchCounter) AppendBatch(_ context.Context, cs []Call) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches = append(b.batches, append([]Call(nil), cs...))
	return len(cs), nil
}

func batchSizes(bs [][]Call) []int {
	var n []int
	for _, b := range bs {
		n = append(n, len(b))
	}
	return n
}

func TestRecorderFlushDelay(t *testing.T) {
	ctx := context.Background()
	t.Run("records sent while the writer gathers go out in one write, and Close does not wait out the delay", func(t *testing.T) {
		bc := &batchCounter{}
		r := NewRecorder(nil, nil, bc, nil, WithFlushDelay(time.Hour))
		for i := range 50 {
			r.Record(ctx, Call{RequestID: fmt.Sprintf("req_%d", i)})
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if len(bc.batches) != 1 || len(bc.batches[0]) != 50 || bc.batches[0][49].RequestID != "req_49" {
			t.Fatalf("%d batches (first of %d), want one of all 50 in order", len(bc.batches), len(bc.batches[0]))
		}
	})
	t.Run("more than a batch holds goes out in full batches, nothing lost, in order", func(t *testing.T) {
		bc := &batchCounter{}
		r := NewRecorder(nil, nil, bc, nil, WithFlushDelay(time.Hour))
		for i := range maxBatch + 44 {
			r.Record(ctx, Call{RequestID: fmt.Sprintf("req_%d", i)})
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if len(bc.batches) != 2 || len(bc.batches[0]) != maxBatch || len(bc.batches[1]) != 44 {
			t.Fatalf("batches of %v records, want %d then 44", batchSizes(bc.batches), maxBatch)
		}
		if last := bc.batches[1][43].RequestID; last != fmt.Sprintf("req_%d", maxBatch+43) {
			t.Fatalf("last record %s", last)
		}
	})
	t.Run("a negative delay writes a lone record without holding it back", func(t *testing.T) {
		g := &gateLedger{entered: make(chan struct{}), release: make(chan struct{})}
		r := NewRecorder(nil, nil, g, nil, WithFlushDelay(-1))
		r.Record(ctx, Call{RequestID: "req_0"})
		<-g.entered // written without waiting for more (a delay of an hour would hang here)
		close(g.release)
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkRecordToFileLedger is Record through the writer goroutine into a file ledger,
// flushed by Close, at the pace the writer keeps: what a busy proxy pays per call for its
// ledger.
func BenchmarkRecordToFileLedger(b *testing.B) {
	l, err := OpenFileLedger(filepath.Join(b.TempDir(), "l.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := NewRecorder(nil, nil, l, zap.NewNop())
	c := sampleCalls()[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for len(r.queue) == cap(r.queue) { // keep pace with the writer: no drops
			runtime.Gosched()
		}
		r.Record(ctx, c)
	}
	if err := r.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if r.Dropped() != 0 || r.Failed() != 0 {
		b.Fatalf("dropped %d failed %d", r.Dropped(), r.Failed())
	}
}

type discardLedger struct{}

func (discardLedger) Append(context.Context, Call) error            { return nil }
func (discardLedger) Query(context.Context, Filter) ([]Call, error) { return nil, nil }
func (discardLedger) Close() error                                  { return nil }

func BenchmarkRecord(b *testing.B) {
	p := shippedPrices(b)
	m := NewMetrics([]string{"acme"}, p.Models())
	r := NewRecorder(p, m, discardLedger{}, zap.NewNop(), WithQueueSize(1<<16))
	defer r.Close(context.Background())
	c := Call{Time: t0, Tenant: "acme", Model: "claude-sonnet-4-5-20250929", RequestID: "req_1", Status: 200,
		Usage: Usage{InputTokens: 1000, OutputTokens: 100, CacheReadInputTokens: 5000},
		Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 3, ClearedInputTokens: 9000}}}
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		r.Record(ctx, c)
	}
}

func BenchmarkFileLedgerAppend(b *testing.B) {
	l, err := OpenFileLedger(filepath.Join(b.TempDir(), "l.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c := sampleCalls()[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Append(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRecorderLiteralAndSetPrices(t *testing.T) {
	ctx := context.Background()
	l, err := OpenFileLedger(filepath.Join(t.TempDir(), "l.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m := NewMetrics([]string{"acme"}, nil)
	r := &Recorder{Metrics: m, Ledger: l} // no prices yet: unknown
	if c := r.Record(ctx, Call{Tenant: "acme", Model: "claude-opus-4-8", Usage: Usage{OutputTokens: 1000}}); !c.PriceUnknown {
		t.Errorf("priced without prices: %+v", c)
	}
	r.SetPrices(shippedPrices(t))
	if c := r.Record(ctx, Call{Tenant: "acme", Model: "claude-opus-4-8", Usage: Usage{OutputTokens: 1000}}); c.PriceUnknown || c.Cost.String() != "0.025" {
		t.Errorf("after SetPrices: %+v", c)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	calls, _ := l.Query(ctx, Filter{})
	if len(calls) != 2 {
		t.Fatalf("ledger has %d calls", len(calls))
	}
	if got := testutil.ToFloat64(m.tokensTotal.WithLabelValues("acme", "claude-opus-4-8", "output")); got != 1000 {
		t.Errorf("after SetPrices the model label is known: %v", got)
	}
	var nothing Recorder // no ledger at all: Record and Close still work
	nothing.Record(ctx, Call{})
	if err := nothing.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// The hand-written line is what encoding/json makes of the record type that
// UnmarshalCall reads, for every kind of call.
func TestAppendCallMatchesTheRecordType(t *testing.T) {
	for i, c := range append(sampleCalls(), Call{Time: t0, Tenant: "q\"uote", Model: "m\u2028", RequestID: "<&>"}) {
		var edits []json.RawMessage
		for _, e := range c.Edits {
			b, _ := e.MarshalJSON()
			edits = append(edits, b)
		}
		if edits == nil {
			edits = []json.RawMessage{}
		}
		r := record{V: LedgerVersion, Time: c.Time.UTC().Format(time.RFC3339Nano), Tenant: c.Tenant, KeyID: c.KeyID, User: c.User, Model: c.Model,
			RequestID: c.RequestID, MessageID: c.MessageID, Stream: c.Stream, Status: c.Status, Usage: c.Usage,
			AppliedEdits: edits, Cleared: c.ClearedInputTokens(), CostUSD: c.Cost, SavingsUSD: c.Savings, PriceUnknown: c.PriceUnknown, Cut: c.Cut,
			BatchID: c.BatchID, CustomID: c.CustomID,
			ServiceTier: c.ServiceTier, Compactions: c.Compactions, CompactionCostUSD: c.CompactionCost,
			CompactedInputTokens: c.CompactedInputTokens, CompactionSavingsUSD: c.CompactionSavings}
		r.Conversation = c.Conversation
		if sh := c.Shadow; sh != nil {
			r.Endpoint, r.Name, r.Shadows = EndpointShadow, sh.Name, sh.Shadows
			in, orig, cost, savings, point := sh.InputTokens, sh.OriginalInputTokens, sh.EstimatedCost, sh.EstimatedSavings, sh.NewClearingPoint
			r.InputTokens, r.OriginalInputTokens, r.EstimatedCostUSD, r.EstimatedSavingsUSD, r.NewClearingPoint = &in, &orig, &cost, &savings, &point
			r.CompactNotMeasured = sh.CompactNotMeasured
		}
		if c.CountTokens == nil && c.Shadow == nil {
			gross, penalty, missed := c.SavingsGross, c.CachePenalty, c.CacheMissedInputTokens
			r.SavingsGrossUSD, r.CachePenaltyUSD, r.CacheMissedInputTokens = &gross, &penalty, &missed
			r.CacheEffect, r.CacheMissCause = c.CacheEffect, c.CacheMissCause
			if r.CacheEffect == "" {
				r.CacheEffect = CacheNone
			}
		}
		for _, it := range c.Iterations {
			r.Iterations = append(r.Iterations, iterationRecord{Type: it.Type, Model: it.Model, Usage: it.Usage, CostUSD: it.Cost})
		}
		if b := c.Breakdown; b != (CostBreakdown{}) {
			r.CostBreakdown = &breakdownRecord{Input: b.Input, Output: b.Output, CacheWrite5m: b.CacheWrite5m, CacheWrite1h: b.CacheWrite1h,
				CacheRead: b.CacheRead, WebSearch: b.WebSearch, BatchDiscount: b.BatchDiscount}
		}
		if ct := c.CountTokens; ct != nil {
			r.Endpoint = EndpointCountTokens
			r.CountTokens = &countRecord{InputTokens: ct.InputTokens}
			if ct.HasOriginal {
				r.CountTokens.ContextManagement = &struct {
					OriginalInputTokens int64 `json:"original_input_tokens"`
				}{ct.OriginalInputTokens}
			}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&r); err != nil {
			t.Fatal(err)
		}
		got := AppendCall(nil, &c)
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("call %d:\n got %s\nwant %s", i, got, want.String())
		}
	}
}

func BenchmarkAppendCall(b *testing.B) {
	c := sampleCalls()[0]
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendCall(buf[:0], &c)
	}
}

// upkeepFailing is a BatchLedger that stores every line and reports its upkeep failing (as the
// PostgreSQL ledger does when its rollup fold fails), or fails the lines from the third on.
type upkeepFailing struct {
	discardLedger
	cutAt int // 0: every line stored
}

func (u *upkeepFailing) AppendBatch(_ context.Context, cs []Call) (int, error) {
	if u.cutAt > 0 && u.cutAt < len(cs) {
		return u.cutAt, errors.New("connection lost")
	}
	return len(cs), errors.New("fold pending rollups: deadlock detected")
}

func TestRecorderCountsOnlyTheLinesALedgerDidNotStore(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cutAt  int
		failed int64
		level  zapcore.Level
	}{
		{"a ledger that stored every line but failed its upkeep: no line failed, a warning", 0, 0, zapcore.WarnLevel},
		{"a ledger that stored two of five: three failed, each an error", 2, 3, zapcore.ErrorLevel},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			r := NewRecorder(nil, nil, &upkeepFailing{cutAt: tt.cutAt}, zap.New(core), WithFlushDelay(time.Hour))
			for i := range 5 {
				r.Record(context.Background(), Call{RequestID: fmt.Sprintf("req_%d", i)})
			}
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r.Failed() != tt.failed {
				t.Errorf("%d failed, want %d", r.Failed(), tt.failed)
			}
			if logs.FilterLevelExact(tt.level).Len() == 0 {
				t.Errorf("no %v line: %v", tt.level, logs.All())
			}
		})
	}
}
