package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// reportCalls are priced with the shipped prices; the expected sums are worked out by hand below.
func reportCalls(t *testing.T) []Call {
	p := shippedPrices(t)
	day1 := time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC)
	day2 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	calls := []Call{
		// acme sonnet 4.5: 100,000×3 + 2,000×15 + 1,000×3.75 + 50,000×0.3 = 300,000+30,000+3,750+15,000 = $0.34875
		// gross: cleared 40,000 × the read price 0.3 = $0.012; penalty: 1,000 missed tokens charged
		// to the edits, all 5m writes, × (3.75 − 0.3) = $0.00345; net $0.00855
		{Time: day1, Tenant: "acme", Model: "claude-sonnet-4-5-20250929", Status: 200,
			Usage:       Usage{InputTokens: 100_000, OutputTokens: 2_000, CacheCreationInputTokens: 1_000, CacheReadInputTokens: 50_000},
			Edits:       []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 6, ClearedInputTokens: 40_000}},
			CacheEffect: CacheMeasured, CacheMissCause: CauseEdits, CacheMissedInputTokens: 1_000},
		// acme sonnet 4.5 (memory-loop second call): 10,000×3 + 500×15 + 60,000×0.3 = 30,000+7,500+18,000 = $0.0555
		// cleared 1,000 + 2,000 = 3,000 × 0.3 = $0.0009, its conversation unknown: no penalty
		{Time: day2, Tenant: "acme", Model: "claude-sonnet-4-5-20250929", Status: 200, Stream: true,
			Usage: Usage{InputTokens: 10_000, OutputTokens: 500, CacheReadInputTokens: 60_000},
			Edits: []AppliedEdit{{Type: EditClearThinking, ClearedThinkingTurns: 2, ClearedInputTokens: 1_000}, {Type: EditClearToolUses, ClearedToolUses: 1, ClearedInputTokens: 2_000}}},
		// acme opus 4.8: 3,333×5 + 777×25 = 16,665 + 19,425 = $0.03609
		{Time: day2.Add(time.Hour), Tenant: "acme", Model: "claude-opus-4-8", Status: 200,
			Usage: Usage{InputTokens: 3_333, OutputTokens: 777}},
		// beta haiku 3: 7×0.25 + 3×1.25 + 11×0.3 + 13×0.03 = 1.75+3.75+3.3+0.39 = $0.00000919
		{Time: day1, Tenant: "beta", Model: "claude-3-haiku-20240307", Status: 200,
			Usage: Usage{InputTokens: 7, OutputTokens: 3, CacheCreationInputTokens: 11, CacheReadInputTokens: 13}},
		// beta unknown model: counted, marked, not priced
		{Time: day2, Tenant: "beta", Model: "claude-unknown-9", Status: 200,
			Usage: Usage{InputTokens: 1_000, OutputTokens: 1_000},
			Edits: []AppliedEdit{{Type: EditClearToolUses, ClearedToolUses: 1, ClearedInputTokens: 500}}},
	}
	for i := range calls {
		p.Price(&calls[i])
	}
	return calls
}

func TestBuildReportByModel(t *testing.T) {
	r := BuildReport(reportCalls(t), GroupByModel)
	type want struct {
		tenant, group                   string
		calls, in, out, cw, cr, cleared int64
		tools, thinking, unknown        int64
		cost, gross, penalty, savings   string
		effectUnknown                   int64
	}
	rows := []want{
		{"acme", "claude-opus-4-8", 1, 3_333, 777, 0, 0, 0, 0, 0, 0, "0.03609", "0", "0", "0", 0},
		{"acme", "claude-sonnet-4-5-20250929", 2, 110_000, 2_500, 1_000, 110_000, 43_000, 7, 2, 0, "0.40425", "0.0129", "0.00345", "0.00945", 1},
		{"beta", "claude-3-haiku-20240307", 1, 7, 3, 11, 13, 0, 0, 0, 0, "0.00000919", "0", "0", "0", 0},
		{"beta", "claude-unknown-9", 1, 1_000, 1_000, 0, 0, 500, 1, 0, 1, "0", "0", "0", "0", 0},
	}
	type sums struct {
		calls, in, out, cw, cr, cleared, tools, thinking, unknown, effectUnknown int64
		cost, gross, penalty, savings                                            Money
	}
	if len(r.Rows) != len(rows) {
		t.Fatalf("rows: %+v", r.Rows)
	}
	for i, w := range rows {
		g := r.Rows[i]
		t.Run(w.tenant+"/"+w.group, func(t *testing.T) {
			gotT := sums{g.Calls, g.InputTokens, g.OutputTokens, g.CacheCreationInputTokens, g.CacheReadInputTokens,
				g.ClearedInputTokens, g.ClearedToolUses, g.ClearedThinkingTurns, g.PriceUnknownCalls, g.CacheEffectUnknownCalls,
				g.CostUSD, g.SavingsGrossUSD, g.CachePenaltyUSD, g.SavingsUSD}
			wantT := sums{w.calls, w.in, w.out, w.cw, w.cr, w.cleared, w.tools, w.thinking, w.unknown, w.effectUnknown,
				usd(t, w.cost), usd(t, w.gross), usd(t, w.penalty), usd(t, w.savings)}
			if g.Tenant != w.tenant || g.Group != w.group || gotT != wantT {
				t.Errorf("row %+v\nwant %+v", g, wantT)
			}
		})
	}
	t.Run("tenant totals and grand total add up to the cent", func(t *testing.T) {
		if len(r.Tenants) != 2 || r.Tenants[0].Tenant != "acme" || r.Tenants[0].CostUSD != usd(t, "0.44034") || r.Tenants[0].SavingsUSD != usd(t, "0.00945") {
			t.Errorf("tenants: %+v", r.Tenants)
		}
		if r.Tenants[1].CostUSD != usd(t, "0.00000919") || r.Tenants[1].PriceUnknownCalls != 1 {
			t.Errorf("beta: %+v", r.Tenants[1])
		}
		if r.Total.Calls != 5 || r.Total.CostUSD != usd(t, "0.44034919") || r.Total.SavingsUSD != usd(t, "0.00945") ||
			r.Total.SavingsGrossUSD != usd(t, "0.0129") || r.Total.CachePenaltyUSD != usd(t, "0.00345") || r.Total.CacheEffectUnknownCalls != 1 ||
			r.Total.InputTokens != 114_340 || r.Total.ClearedInputTokens != 43_500 || r.Total.PriceUnknownCalls != 1 {
			t.Errorf("total: %+v", r.Total)
		}
	})
	var buf bytes.Buffer
	if err := WriteReportTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_model.txt", buf.Bytes())
	buf.Reset()
	if err := WriteReportJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_model.json", buf.Bytes())
}

func TestBuildReportByDay(t *testing.T) {
	r := BuildReport(reportCalls(t), GroupByDay)
	got := []string{}
	for _, row := range r.Rows {
		got = append(got, row.Tenant+" "+row.Group+" "+num(row.Calls)+" "+row.CostUSD.String())
	}
	want := []string{
		"acme 2026-03-01 1 0.34875",
		"acme 2026-03-02 2 0.09159", // 0.0555 + 0.03609
		"beta 2026-03-01 1 0.00000919",
		"beta 2026-03-02 1 0.00",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var buf bytes.Buffer
	if err := WriteReportTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_day.txt", buf.Bytes())
}

func TestEmptyReport(t *testing.T) {
	r := BuildReport(nil, "")
	b, _ := json.Marshal(r)
	if string(b) != `{"group_by":"model","rows":[],"tenants":[],"total":{"calls":0,"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cleared_input_tokens":0,"cleared_tool_uses":0,"cleared_thinking_turns":0,"cost_usd":0.00,"savings_usd":0.00,"savings_gross_usd":0.00,"cache_penalty_usd":0.00,"cache_missed_input_tokens":0,"cache_effect_unknown_calls":0,"cache_hit_rate":0,"price_unknown_calls":0,"web_search_requests":0,"compactions":0,"compaction_cost_usd":0.00,"compaction_savings_usd":0.00}}` {
		t.Errorf("empty report JSON: %s", b)
	}
	var buf bytes.Buffer
	WriteReportTable(&buf, r)
	if !strings.HasPrefix(buf.String(), "TENANT") || !strings.Contains(buf.String(), "TOTAL") {
		t.Errorf("empty table:\n%s", buf.String())
	}
}

func TestParseFilter(t *testing.T) {
	tests := []struct {
		name, since, until string
		wantSince, wantEnd time.Time
		err                string
	}{
		{name: "dates: until includes its day", since: "2026-03-01", until: "2026-03-02",
			wantSince: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), wantEnd: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)},
		{name: "RFC 3339 with offset", since: "2026-03-01T10:00:00+02:00",
			wantSince: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)},
		{name: "open ends"},
		{name: "garbage", since: "yesterday", err: "since:"},
		{name: "since after until", since: "2026-03-05", until: "2026-03-01", err: "not before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseFilter("acme", tt.since, tt.until)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || f.Tenant != "acme" || !f.Since.Equal(tt.wantSince) || !f.Until.Equal(tt.wantEnd) {
				t.Errorf("filter %+v err %v", f, err)
			}
		})
	}
}

// TestReportSurvivesRestart records through a Recorder into a file ledger, "restarts" by
// reopening the file, and checks the report's totals are unchanged.
func TestReportSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	spec := "file:" + filepath.Join(t.TempDir(), "data", "ledger.jsonl")
	calls := reportCalls(t)
	l, err := OpenLedger(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(shippedPrices(t), NewMetrics(nil, nil), l, nil)
	for _, c := range calls[:3] {
		rec.Record(ctx, c)
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := RunReport(ctx, l, Filter{}, GroupByModel)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()

	l, err = OpenLedger(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	after, err := RunReport(ctx, l, Filter{}, GroupByModel)
	if err != nil {
		t.Fatal(err)
	}
	if after.Total != before.Total || after.Total.CostUSD != usd(t, "0.44034") || after.Total.Calls != 3 {
		t.Errorf("after restart %+v, before %+v", after.Total, before.Total)
	}
	rec = NewRecorder(shippedPrices(t), nil, l, nil)
	for _, c := range calls[3:] {
		rec.Record(ctx, c)
	}
	rec.Close(ctx)
	after, _ = RunReport(ctx, l, Filter{}, GroupByModel)
	if after.Total.CostUSD != usd(t, "0.44034919") || after.Total.Calls != 5 {
		t.Errorf("after more calls: %+v", after.Total)
	}
}

func TestReportHandler(t *testing.T) {
	ctx := context.Background()
	l, err := OpenFileLedger(filepath.Join(t.TempDir(), "l.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range reportCalls(t) {
		if err := l.Append(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	enabled := httptest.NewServer(NewReportHandler(l, WithLogger(zap.NewNop())))
	defer enabled.Close()

	tests := []struct {
		name    string
		srv     *httptest.Server
		method  string
		query   string
		status  int
		errType string
		check   func(t *testing.T, r Report)
	}{
		{name: "the report, by model", srv: enabled, status: 200,
			check: func(t *testing.T, r Report) {
				if r.Total.Calls != 5 || r.Total.CostUSD != usd(t, "0.44034919") || r.GroupBy != GroupByModel {
					t.Errorf("report %+v", r.Total)
				}
			}},
		{name: "filters and day grouping", srv: enabled,
			query: "?tenant=acme&since=2026-03-02&until=2026-03-02&group_by=day", status: 200,
			check: func(t *testing.T, r Report) {
				if len(r.Rows) != 1 || r.Rows[0].Group != "2026-03-02" || r.Total.Calls != 2 || r.Total.CostUSD != usd(t, "0.09159") ||
					r.Tenant != "acme" || r.Since == nil || r.Until == nil || !r.Until.Equal(time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)) {
					t.Errorf("report %+v", r)
				}
			}},
		{name: "bad group_by: 400", srv: enabled, query: "?group_by=week", status: 400, errType: "invalid_request_error"},
		{name: "bad since: 400", srv: enabled, query: "?since=tomorrow", status: 400, errType: "invalid_request_error"},
		{name: "unknown parameter: 400", srv: enabled, query: "?grop_by=day", status: 400, errType: "invalid_request_error"},
		{name: "POST: 405", srv: enabled, method: "POST", status: 405, errType: "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = "GET"
			}
			req, _ := http.NewRequest(method, tt.srv.URL+"/admin/report"+tt.query, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("content-type %q", resp.Header.Get("Content-Type"))
			}
			if tt.errType != "" {
				var e struct {
					Type  string `json:"type"`
					Error struct{ Type, Message string }
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != tt.errType || e.Error.Message == "" {
					t.Errorf("error body %s", body)
				}
				return
			}
			var r Report
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("decode %s: %v", body, err)
			}
			tt.check(t, r)
		})
	}
}

func TestReportGroupsByKeyAndUser(t *testing.T) {
	calls := []Call{
		{Tenant: "acme", KeyID: "aaaaaaaa", User: "ana", Usage: Usage{InputTokens: 1}},
		{Tenant: "acme", KeyID: "aaaaaaaa", User: "ana", Usage: Usage{InputTokens: 2}},
		{Tenant: "acme", KeyID: "bbbbbbbb", User: "ana", Usage: Usage{InputTokens: 4}}, // ana's second key
		{Tenant: "acme", KeyID: "cccccccc", Usage: Usage{InputTokens: 8}},              // a key of the policy: no user
		{Tenant: "beta", Usage: Usage{InputTokens: 16}},                                // no key at all
	}
	for _, tc := range []struct {
		groupBy string
		want    map[string]int64 // tenant/group → input tokens
	}{
		{GroupByKey, map[string]int64{"acme/aaaaaaaa": 3, "acme/bbbbbbbb": 4, "acme/cccccccc": 8, "beta/(none)": 16}},
		{GroupByUser, map[string]int64{"acme/ana": 7, "acme/(none)": 8, "beta/(none)": 16}},
	} {
		t.Run("by "+tc.groupBy, func(t *testing.T) {
			g, err := ParseGroupBy(tc.groupBy)
			if err != nil {
				t.Fatal(err)
			}
			r := BuildReport(calls, g)
			got := map[string]int64{}
			for _, row := range r.Rows {
				got[row.Tenant+"/"+row.Group] = row.InputTokens
			}
			if !reflect.DeepEqual(got, tc.want) || r.GroupBy != tc.groupBy || r.Total.InputTokens != 31 {
				t.Fatalf("rows %v, group_by %q, total %d", got, r.GroupBy, r.Total.InputTokens)
			}
			var b strings.Builder
			if err := WriteReportTable(&b, r); err != nil {
				t.Fatal(err)
			}
			hdr := map[string]string{GroupByKey: "KEY_ID", GroupByUser: "USER"}[tc.groupBy]
			if !strings.HasPrefix(b.String(), "TENANT  "+hdr) {
				t.Fatalf("table header: %q", strings.SplitN(b.String(), "\n", 2)[0])
			}
		})
	}
}

// A period with compactions shows their count and cost in the table (part of COST_USD).
func TestReportShowsCompactions(t *testing.T) {
	p := shippedPrices(t)
	r := ParseReply([]byte(`{"model":"claude-opus-4-6","usage":` + exactTranscriptUsage + `}`))
	c := Call{Time: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Tenant: "acme", Model: r.Model, Usage: r.Billed(), Iterations: r.Iterations}
	plain := Call{Time: c.Time, Tenant: "acme", Model: "claude-opus-4-6", Usage: Usage{InputTokens: 1000}}
	// The measure (compact.measure_savings): without compaction the request counts 185,000
	// tokens; the compacted call read 3,500: 181,500 × $5/M = 0.9075 spared.
	measure := Call{Time: c.Time, Tenant: "acme", Model: "claude-opus-4-6", CountTokens: &CountTokens{InputTokens: 185000}, CompactedInputTokens: 3500}
	p.Price(&c)
	p.Price(&plain)
	p.PriceCompactionMeasure(&measure)
	rep := BuildReport([]Call{c, plain, measure}, GroupByModel)
	if rep.Total.Compactions != 1 || rep.Total.CompactionCostUSD != usd(t, "0.975") || rep.Total.CostUSD != usd(t, "1.125") ||
		rep.Total.WebSearchRequests != 3 || rep.Total.CompactionSavingsUSD != usd(t, "0.9075") || rep.Total.Calls != 2 {
		t.Errorf("totals %+v", rep.Total)
	}
	var buf bytes.Buffer
	if err := WriteReportTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_compaction.txt", buf.Bytes())
}
