package proxy

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

func TestPointResultsAtTheProxy(t *testing.T) {
	const base = "https://proxy.example"
	tests := []struct {
		name, path, in, want string
	}{
		{"a batch that ended", "results_url",
			`{"id":"msgbatch_1","results_url":"https://api.anthropic.com/v1/messages/batches/msgbatch_1/results","type":"message_batch"}`,
			`{"id":"msgbatch_1","results_url":"https://proxy.example/v1/messages/batches/msgbatch_1/results","type":"message_batch"}`},
		{"an upstream under a path prefix, with a query", "results_url",
			`{"results_url":"http://gw:8080/anthropic/v1/messages/batches/msgbatch_2/results?beta=true"}`,
			`{"results_url":"https://proxy.example/v1/messages/batches/msgbatch_2/results?beta=true"}`},
		{"a batch still running keeps its null", "results_url",
			`{"id":"msgbatch_3","results_url":null}`, `{"id":"msgbatch_3","results_url":null}`},
		{"a page of batches, some ended", "data.#.results_url",
			`{"data":[{"id":"a","results_url":"https://x/v1/messages/batches/a/results"},{"id":"b","results_url":null},` +
				`{"id":"c","results_url":"https://x/v1/messages/batches/c/results"}],"has_more":false}`,
			`{"data":[{"id":"a","results_url":"https://proxy.example/v1/messages/batches/a/results"},{"id":"b","results_url":null},` +
				`{"id":"c","results_url":"https://proxy.example/v1/messages/batches/c/results"}],"has_more":false}`},
		{"a URL of another shape is left alone", "results_url",
			`{"results_url":"https://files.example/abc"}`, `{"results_url":"https://files.example/abc"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(pointResults([]byte(tt.in), tt.path, base)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// The results of a claimed batch are accounted whole even when the client reads none of them
// (the proxy reads on), a line at a time however the reads split them.
func TestResultsMeterAccountsEveryResultOnce(t *testing.T) {
	prices, err := tokens.ParsePrices([]byte("models:\n  - model: m\n    input: 1\n    output: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := limits.NewMemoryStore()
	e := limits.New(limits.Config{Spend: store, Rate: limits.NewMemoryRate(), Prices: prices})
	s := &Server{cfg: Config{Limits: e}, log: zap.NewNop()}
	day, _ := limits.Bucket(policy.Daily, time.Now())
	cs := []limits.Counter{{Bucket: day}}
	ok := func(id string, in, out int) string {
		return `{"custom_id":"` + id + `","result":{"type":"succeeded","message":{"id":"msg_` + id + `","model":"m","content":[],` +
			`"usage":{"input_tokens":` + strconv.Itoa(in) + `,"output_tokens":` + strconv.Itoa(out) + `,"service_tier":"batch"}}}}`
	}
	body := ok("a", 1000, 100) + "\n" + `{"custom_id":"b","result":{"type":"canceled"}}` + "\n" +
		`{"custom_id":"c","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"x"}}}}` + "\n" +
		ok("d", 2000, 0) // the last line has no newline
	for _, read := range []string{"none", "one byte at a time"} {
		t.Run("the client reads "+read, func(t *testing.T) {
			id := "msgbatch_" + strings.ReplaceAll(read, " ", "_")
			e.OpenBatch(context.Background(), nil, limits.Batch{ID: id, Tenant: "acme", Counters: cs})
			c := e.ClaimBatch(context.Background(), id, "acme")
			if c == nil {
				t.Fatal("not claimed")
			}
			m := &resultsMeter{s: s, claim: c, body: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), cancel: func() {}}
			if read != "none" {
				if b, err := io.ReadAll(iotest.OneByteReader(m)); err != nil || string(b) != body {
					t.Fatalf("relayed %q, %v", b, err)
				}
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			// (1000 × $1 + 100 × $10) / 2 + 2000 × $1 / 2 per million = $0.001 + $0.001.
			if m.results != 2 || m.cost != 2_000_000 {
				t.Errorf("accounted %d results costing %s, want 2 costing $0.002", m.results, m.cost)
			}
		})
	}
	spent, _ := store.Spent(context.Background(), "acme", cs)
	if spent[0] != 4_000_000 {
		t.Errorf("spent %s, want both reads' $0.002", spent[0])
	}
}
