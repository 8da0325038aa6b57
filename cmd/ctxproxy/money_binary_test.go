package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// Money that must not escape the caps or the ledger, through the built binary: holds that
// cannot overflow, settlement at the ledger's own cost, cut streams, batches.

// A reserve_output_tokens past what any model answers is a load error naming its file and line;
// and no price makes a hold wrap around int64 to an amount that fits under a cap.
func TestHoldsAreBoundedAndCannotOverflow(t *testing.T) {
	t.Run("reserve_output_tokens past any model's output is refused with its file and line", func(t *testing.T) {
		dir, _, err := stack.Layout(t.TempDir(), map[string]string{
			"capped.yaml": stack.TenantPolicy("capped", capKey,
				"limits:\n  spend: [{period: daily, usd: 1}]\n  reserve_output_tokens: 9223372036854775807\n"),
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary(t), "validate", "--policies", dir).CombinedOutput()
		if err == nil {
			t.Fatalf("validate accepted reserve_output_tokens 9223372036854775807:\n%s", out)
		}
		if want := "capped.yaml:5: limits.reserve_output_tokens must be at most 1000000"; !strings.Contains(string(out), want) {
			t.Errorf("validate said:\n%s\nwant %q", out, want)
		}
		p := exec.Command(binary(t), "--listen", "127.0.0.1:0", "--policies", dir, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
		if out, err := p.CombinedOutput(); err == nil || !strings.Contains(string(out), "reserve_output_tokens must be at most") {
			t.Errorf("the proxy started on that policy: %v\n%s", err, out)
		}
	})

	t.Run("a hold past int64 is refused, not wrapped to a negative amount under the cap", func(t *testing.T) {
		// $9,000,000,000,000 per million output tokens: 4096 held output tokens cost more than
		// int64 nano-dollars hold, which once wrapped to about -$29,000,000 and fit any cap.
		dir, _, err := stack.Layout(t.TempDir(), map[string]string{
			"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 1}]\n"),
			"prices.yaml": "models:\n  - model: m\n    input: 1\n    output: 9000000000000\n",
		})
		if err != nil {
			t.Fatal(err)
		}
		fake, upURL := fakeUpstream(t)
		fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply { return fakeapi.TextReply("ok") })
		p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
		body := `{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
		resp, got := post(t, p.Addr, capKey, body)
		if resp.StatusCode != 429 || gjson.Get(got, "error.type").Str != "billing_error" {
			t.Fatalf("a request holding more than int64 nano-dollars: %d %s, want 429 billing_error", resp.StatusCode, got)
		}
		if n := len(proxiedCalls(fake)); n != 0 {
			t.Errorf("%d requests reached the upstream", n)
		}
	})
}

// moneyStack is a proxy in front of an in-process fake whose tenant "capped" (capKey) has a $1
// daily cap, prices from capPrices (model m: $1 and $10 per million tokens) plus extra, and a
// file ledger.
type moneyStack struct {
	fake   *fakeapi.API
	proc   *binaries.Process
	ledger string
}

func startMoneyStack(t *testing.T, limitsYAML, extraPrices string) *moneyStack {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"capped.yaml": stack.TenantPolicy("capped", capKey, limitsYAML),
		"prices.yaml": capPrices + extraPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+ledger, "--admin-token", "adm")
	return &moneyStack{fake: fake, proc: p, ledger: ledger}
}

// ledgerLines waits until the ledger holds n lines and returns them.
func (m *moneyStack) ledgerLines(t *testing.T, n int) []gjson.Result {
	t.Helper()
	var lines []gjson.Result
	eventually(t, fmt.Sprintf("%d ledger lines", n), func() {
		for {
			b, _ := os.ReadFile(m.ledger)
			lines = lines[:0]
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					lines = append(lines, gjson.Parse(l))
				}
			}
			if len(lines) >= n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return lines
}

// spent is the tenant's settled spend against its daily cap, as /admin/report shows it.
func (m *moneyStack) spent(t *testing.T) tokens.Money {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+m.proc.Addr+"/admin/report?tenant=capped", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, c := range gjson.GetBytes(b, "caps").Array() {
		if c.Get("period").Str == "daily" && c.Get("user").Str == "" {
			v, err := tokens.ParseMoney(c.Get("spent_usd").String())
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no daily cap in /admin/report: %s", b)
	return 0
}

// settled waits until the daily spend is no longer before: a request settles just after its
// client has the reply.
func (m *moneyStack) settled(t *testing.T, before tokens.Money) {
	t.Helper()
	eventually(t, "the request settled", func() {
		for m.spent(t) == before {
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// sumCost is the sum of the lines' cost_usd.
func sumCost(t *testing.T, lines []gjson.Result) tokens.Money {
	t.Helper()
	var sum tokens.Money
	for _, l := range lines {
		v, err := tokens.ParseMoney(l.Get("cost_usd").String())
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// A capped tenant is charged exactly what its ledger lines cost, usage.iterations included:
// a compaction step and a fallback to another model, which the top-level usage leaves out.
func TestCapsSettleTheLedgersCost(t *testing.T) {
	m := startMoneyStack(t, "limits:\n  spend: [{period: daily, usd: 1}]\n",
		"  - model: m-fallback\n    input: 3\n    output: 15\n")
	// compaction (m): 180,000 in, 3,000 out = $0.18 + $0.03
	// fallback_message (m-fallback): 2,000 in, 500 out = $0.006 + $0.0075
	// message (m): 1,500 in, 800 out = $0.0015 + $0.008; the top-level usage is this step alone.
	usage := `{"input_tokens":1500,"output_tokens":800,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"iterations":[` +
		`{"type":"compaction","input_tokens":180000,"output_tokens":3000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},` +
		`{"type":"fallback_message","model":"m-fallback","input_tokens":2000,"output_tokens":500,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},` +
		`{"type":"message","input_tokens":1500,"output_tokens":800,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}]}`
	m.fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
		r := fakeapi.TextReply("ok")
		r.RawUsage = []byte(usage)
		return r
	})
	const perCall = tokens.Money(180_000_000 + 30_000_000 + 6_000_000 + 7_500_000 + 1_500_000 + 8_000_000) // $0.233
	for i, stream := range []bool{false, true} {
		body := capBody
		if stream {
			body = strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
		}
		before := m.spent(t)
		resp, got := post(t, m.proc.Addr, capKey, body)
		if resp.StatusCode != 200 {
			t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, got)
		}
		lines := m.ledgerLines(t, i+1)
		if c := lines[i].Get("cost_usd").String(); c != perCall.String() {
			t.Fatalf("stream %v: ledger cost_usd %s, want %s: %s", stream, c, perCall, lines[i].Raw)
		}
		want := sumCost(t, lines)
		m.settled(t, before)
		if got := m.spent(t); got != want {
			t.Errorf("stream %v: the daily cap was charged %s; the ledger says %s", stream, got, want)
		}
	}
}

// holdingUpstream streams a message_start (25 input tokens, 1 output token) and deltas of text,
// then holds the stream open before its message_delta until the proxy cancels it.
func holdingUpstream(t *testing.T, deltas []string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fl := w.(http.Flusher)
		event := func(name, data string) {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
			fl.Flush()
		}
		event("message_start", `{"type":"message_start","message":{"id":"msg_cut","type":"message","role":"assistant","model":"m","content":[],`+
			`"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`)
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		for _, d := range deltas {
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(mustQuote(d))+`}}`)
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func mustQuote(s string) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// cutAfterDeltas streams body through the proxy and closes the connection once n text deltas
// have arrived, before any message_delta.
func cutAfterDeltas(t *testing.T, addr, body string, n int) {
	t.Helper()
	resp, err := http.DefaultClient.Do(keyRequest(http.MethodPost, "http://"+addr+"/v1/messages", capKey, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for seen := 0; seen < n && sc.Scan(); {
		if sc.Text() == "event: message_delta" {
			t.Fatal("message_delta reached the client")
		}
		if sc.Text() == "event: content_block_delta" {
			seen++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// A client that cuts a stream before its message_delta is charged, in its ledger line and
// against its cap, the output its relayed deltas carry or the output its request held,
// whichever is more, and the line says "cut": true.
func TestACutStreamIsChargedWhatItReceived(t *testing.T) {
	cases := []struct {
		name       string
		deltas     []string
		maxTokens  int
		wantOutput int64
	}{
		{"60,000 tokens relayed: charged the 60,000 its deltas carry",
			slices.Repeat([]string{strings.Repeat("abcd", 1000)}, 60), 100, 60_000},
		{"10 tokens relayed: charged the 1,000 output tokens its request held",
			[]string{strings.Repeat("abcd", 10)}, 1000, 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _, err := stack.Layout(t.TempDir(), map[string]string{
				"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 1}]\n"),
				"prices.yaml": capPrices,
			})
			if err != nil {
				t.Fatal(err)
			}
			ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
			p := startProxy(t, "--upstream", holdingUpstream(t, c.deltas), "--policies", dir, "--memory-dir", t.TempDir(),
				"--ledger", "file:"+ledger, "--admin-token", "adm")
			m := &moneyStack{proc: p, ledger: ledger}
			body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"write"}]}`, c.maxTokens)
			cutAfterDeltas(t, p.Addr, body, len(c.deltas))
			line := m.ledgerLines(t, 1)[0]
			if !line.Get("cut").Bool() || line.Get("usage.output_tokens").Int() != c.wantOutput || line.Get("usage.input_tokens").Int() != 25 {
				t.Fatalf("ledger line %s: want cut, 25 input and %d output tokens", line.Raw, c.wantOutput)
			}
			want := tokens.Money(25*1000 + c.wantOutput*10_000)
			if got := line.Get("cost_usd").String(); got != want.String() {
				t.Errorf("cost_usd %s, want %s", got, want)
			}
			m.settled(t, 0)
			if got := m.spent(t); got != want {
				t.Errorf("the cap was charged %s, the ledger line says %s", got, want)
			}
		})
	}
}

// batchBody is a batch of n requests for model m with max_tokens maxTokens, custom_ids r0, r1…
func batchBody(n, maxTokens int) string {
	reqs := make([]string, n)
	for i := range reqs {
		reqs[i] = fmt.Sprintf(`{"custom_id":"r%d","params":{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"item %d"}]}}`, i, maxTokens, i)
	}
	return `{"requests":[` + strings.Join(reqs, ",") + `]}`
}

// batchUpstream is a fake whose every reply, batched or not, reads 1,000 input tokens and
// writes 200: $0.003 of model m, $0.0015 on the batch tier.
func batchUpstream(t *testing.T) (*fakeapi.API, string) {
	fake, upURL := fakeUpstream(t)
	fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
		r := fakeapi.TextReply("done")
		r.Usage = &fakeapi.Usage{InputTokens: 1000, OutputTokens: 200}
		return r
	})
	return fake, upURL
}

// batchCall sends a request with key to the proxy and returns its status and body.
func batchCall(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(keyRequest(method, url, key, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// keyRequest is a request to the API with key, as an SDK sends it.
func keyRequest(method, url, key, body string) *http.Request {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	return req
}

// Message Batches are admitted like their requests and paid for when their results pass
// through the proxy: holds at the batch tier, refused whole past the cap, per-minute limits per
// request, a ledger line per result settling the holds once, and a canceled or expired batch
// releasing what it did not use.
func TestBatchesPayLikeTheirRequests(t *testing.T) {
	const rpmKey = "sk-ant-limits-test-rpm"
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		// $0.10 a day: a batch of 3 requests of max_tokens 4096 holds about $0.0615 (each 4096
		// output tokens at $10 per million, half price), a lone request of max_tokens 4096
		// about $0.041: both together do not fit.
		"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 0.10}]\n"),
		"rpm.yaml":    stack.TenantPolicy("rpm", rpmKey, "limits:\n  requests_per_minute: 10\n"),
		"prices.yaml": capPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := batchUpstream(t)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+ledger, "--admin-token", "adm")
	m := &moneyStack{fake: fake, proc: p, ledger: ledger}
	base := "http://" + p.Addr
	lone := `{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"alone"}]}`
	batches := func() int {
		n := 0
		for _, r := range proxiedCalls(fake) {
			if r.Path == "/v1/messages/batches" && r.Method == http.MethodPost {
				n++
			}
		}
		return n
	}
	create := func(t *testing.T, key, body string) string {
		t.Helper()
		st, b := batchCall(t, http.MethodPost, base+"/v1/messages/batches", key, body)
		if st != 200 {
			t.Fatalf("create: %d %s", st, b)
		}
		return gjson.Get(b, "id").Str
	}
	// fetchResults retrieves the batch through the proxy and reads its results where
	// results_url says, as the TypeScript SDK does.
	fetchResults := func(t *testing.T, id string) []string {
		t.Helper()
		st, b := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id, capKey, "")
		url := gjson.Get(b, "results_url").Str
		if st != 200 || url != base+"/v1/messages/batches/"+id+"/results" {
			t.Fatalf("retrieve: %d %s; want results_url at the proxy", st, b)
		}
		st, b = batchCall(t, http.MethodGet, url, capKey, "")
		if st != 200 {
			t.Fatalf("results: %d %s", st, b)
		}
		return strings.Split(strings.TrimSpace(b), "\n")
	}
	loneFits := func(t *testing.T, want bool) {
		t.Helper()
		st, b := batchCall(t, http.MethodPost, base+"/v1/messages", capKey, lone)
		if want && st != 200 || !want && (st != 429 || gjson.Get(b, "error.type").Str != "rate_limit_error") {
			t.Fatalf("a lone request beside the batch's hold: %d %s (want it to fit: %v)", st, b, want)
		}
	}

	t.Run("a batch whose holds pass the cap is refused whole, every time", func(t *testing.T) {
		for range 2 {
			st, b := batchCall(t, http.MethodPost, base+"/v1/messages/batches", capKey, batchBody(200, 32000))
			if st != 429 || gjson.Get(b, "error.type").Str != "billing_error" || !strings.Contains(gjson.Get(b, "error.message").Str, "this batch of 200 requests") {
				t.Fatalf("%d %s", st, b)
			}
		}
		if n := batches(); n != 0 {
			t.Errorf("%d batches reached the upstream", n)
		}
	})

	t.Run("requests_per_minute counts every batched request", func(t *testing.T) {
		create(t, rpmKey, batchBody(6, 100))
		st, b := batchCall(t, http.MethodPost, base+"/v1/messages/batches", rpmKey, batchBody(6, 100))
		if st != 429 || gjson.Get(b, "error.type").Str != "rate_limit_error" || !strings.Contains(b, "requests_per_minute") {
			t.Fatalf("a second batch of 6 under 10 a minute: %d %s", st, b)
		}
	})

	var lines int // ledger lines so far
	t.Run("results fetched through the proxy are ledger lines that settle the batch's hold once", func(t *testing.T) {
		id := create(t, capKey, batchBody(3, 4096))
		loneFits(t, false)
		if err := fake.ProcessBatch(id, 0); err != nil {
			t.Fatal(err)
		}
		before := m.spent(t)
		results := fetchResults(t, id)
		if len(results) != 3 || gjson.Get(results[0], "result.type").Str != "succeeded" {
			t.Fatalf("results: %v", results)
		}
		m.settled(t, before)
		ledgerLines := m.ledgerLines(t, 3)
		for _, l := range ledgerLines {
			if l.Get("batch_id").Str != id || l.Get("service_tier").Str != "batch" || l.Get("cost_usd").String() != "0.0015" ||
				l.Get("tenant").Str != "capped" || l.Get("key_id").Str == "" || !strings.HasPrefix(l.Get("custom_id").Str, "r") {
				t.Errorf("ledger line %s", l.Raw)
			}
		}
		if got, want := m.spent(t), sumCost(t, ledgerLines); got != want || want != 4_500_000 {
			t.Errorf("the cap was charged %s; the ledger says %s (3 × $0.0015)", got, want)
		}
		fetchResults(t, id) // again: nothing more to pay
		loneFits(t, true)   // the hold is gone; and its ledger line comes after any the second read wrote
		all := m.ledgerLines(t, 4)
		if len(all) != 4 || all[3].Get("batch_id").Str != "" {
			t.Fatalf("reading the results again wrote ledger lines: %d lines", len(all))
		}
		if got := m.spent(t); got != 4_500_000+sumCost(t, all[3:]) {
			t.Errorf("spent %s after a second read", got)
		}
		lines = 4
	})

	t.Run("a batch canceled part way is charged what ran and releases the rest", func(t *testing.T) {
		id := create(t, capKey, batchBody(3, 4096))
		if err := fake.ProcessBatch(id, 1); err != nil {
			t.Fatal(err)
		}
		st, b := batchCall(t, http.MethodPost, base+"/v1/messages/batches/"+id+"/cancel", capKey, "")
		if st != 200 || gjson.Get(b, "processing_status").Str != "canceling" {
			t.Fatalf("cancel: %d %s", st, b)
		}
		if err := fake.ProcessBatch(id, 0); err != nil {
			t.Fatal(err)
		}
		before := m.spent(t)
		results := fetchResults(t, id)
		if len(results) != 3 {
			t.Fatalf("results: %v", results)
		}
		m.settled(t, before)
		got := m.ledgerLines(t, lines+1)
		if len(got) != lines+1 || got[lines].Get("batch_id").Str != id {
			t.Fatalf("want one ledger line for the one request that ran, got %d lines", len(got)-lines)
		}
		if spent := m.spent(t); spent != before+1_500_000 {
			t.Errorf("spent %s, want %s + $0.0015", spent, before)
		}
		loneFits(t, true)
		lines += 2
	})

	for _, end := range []string{"canceled", "expired"} {
		t.Run("a batch that ended with nothing run releases its hold when it is retrieved: "+end, func(t *testing.T) {
			id := create(t, capKey, batchBody(3, 4096))
			loneFits(t, false)
			if end == "canceled" {
				if st, b := batchCall(t, http.MethodPost, base+"/v1/messages/batches/"+id+"/cancel", capKey, ""); st != 200 {
					t.Fatalf("cancel: %d %s", st, b)
				}
				if err := fake.ProcessBatch(id, 0); err != nil {
					t.Fatal(err)
				}
			} else if err := fake.ExpireBatch(id); err != nil {
				t.Fatal(err)
			}
			st, b := batchCall(t, http.MethodGet, base+"/v1/messages/batches/"+id, capKey, "")
			if st != 200 || gjson.Get(b, "request_counts."+end).Int() != 3 {
				t.Fatalf("retrieve: %d %s", st, b)
			}
			loneFits(t, true)
			lines++
		})
	}
}

// Two replicas on one database: a batch created through one is paid for when its results pass
// through the other, once, whichever replica reads them again.
func TestBatchResultsAreAccountedOnceAcrossReplicas(t *testing.T) {
	db := pgtest.New(t, "batches_test")
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 1}]\n"),
		"prices.yaml": capPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := batchUpstream(t)
	var replicas []*binaries.Process
	ledgers := make([]string, 2)
	for i := range 2 {
		ledgers[i] = filepath.Join(t.TempDir(), "ledger.jsonl")
		replicas = append(replicas, startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+ledgers[i], "--limits-store", db.URL))
	}
	st, b := batchCall(t, http.MethodPost, "http://"+replicas[0].Addr+"/v1/messages/batches", capKey, batchBody(4, 4096))
	if st != 200 {
		t.Fatalf("create: %d %s", st, b)
	}
	id := gjson.Get(b, "id").Str
	if n := db.QueryInt(t, `SELECT count(*) FROM ctxproxy_spend_holds WHERE expires_at > now() + interval '24 hours'`); n == 0 {
		t.Fatal("the batch holds nothing past a request's hold time")
	}
	if err := fake.ProcessBatch(id, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*binaries.Process{replicas[1], replicas[0], replicas[1]} {
		st, b := batchCall(t, http.MethodGet, "http://"+p.Addr+"/v1/messages/batches/"+id+"/results", capKey, "")
		if st != 200 || strings.Count(b, `"succeeded"`) != 4 {
			t.Fatalf("results: %d %s", st, b)
		}
	}
	settled(t, db)
	day := time.Now().UTC().Format("2006-01-02")
	if spent := db.QueryInt(t, `SELECT spent_nano FROM ctxproxy_spend WHERE tenant = 'capped' AND end_user = '' AND bucket = $1`, day); spent != 4*1_500_000 {
		t.Errorf("spent %d nano-USD, want 4 × $0.0015 once", spent)
	}
	m := &moneyStack{ledger: ledgers[1]}
	if lines := m.ledgerLines(t, 4); len(lines) != 4 || lines[0].Get("batch_id").Str != id {
		t.Errorf("the replica that read the results first has %d ledger lines", len(lines))
	}
	if b, _ := os.ReadFile(ledgers[0]); len(b) != 0 {
		t.Errorf("the other replica wrote ledger lines for results already accounted: %s", b)
	}
}
