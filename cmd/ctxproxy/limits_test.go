package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/binaries"
	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/internal/pgtest"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// capPrices prices model m at $1 per million input tokens and $10 per million output tokens:
// 1,000 and 10,000 nano-USD a token.
const capPrices = "models:\n  - model: m\n    input: 1\n    output: 10\n    cache_write: 1.25\n    cache_read: 0.1\n"

const (
	capKey   = "sk-ant-limits-test-capped"
	burstKey = "sk-ant-limits-test-burst"
)

// capBody is every request of the cap test: 4 bytes a token makes its input estimate exact.
const capBody = `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"how much is left?"}]}`

func capPolicies(t *testing.T, burstTenant string) string {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 1}, {period: monthly, usd: 100}]\n"),
		"burst.yaml":  stack.TenantPolicy(burstTenant, burstKey, "limits:\n  requests_per_minute: 20\n"),
		"prices.yaml": capPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func post(t *testing.T, addr, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A tenant at 99% of its daily cap sends 50 small requests at once, 25 to each of two replicas
// on one database. Each holds $0.00102 (27 input tokens estimated from its 106 bytes at $1/M, and
// max_tokens 100 at $10/M) until its reply, so exactly floor($0.01 / $0.001027) = 9 fit; the
// upstream keeps every admitted request waiting until all 50 are answered or waiting, so no
// settle can make room early. Then each admitted request settles its real cost, exactly.
func TestSpendCapExactAcrossTwoReplicas(t *testing.T) {
	db := pgtest.New(t, "caps_test")
	fake, upURL := fakeUpstream(t)
	release := make(chan struct{})
	var arrived atomic.Int64
	fake.SetResponder(func(r *fakeapi.Request) fakeapi.Reply {
		arrived.Add(1)
		<-release
		reply := fakeapi.TextReply("ok")
		reply.Usage = &fakeapi.Usage{InputTokens: 10, OutputTokens: 5} // $0.00006
		reply.Header = http.Header{"Anthropic-Ratelimit-Requests-Remaining": {"3999"}}
		return reply
	})
	pols := capPolicies(t, "burst")
	var replicas []*binaries.Process
	for i := range 2 {
		replicas = append(replicas, startProxy(t, "--upstream", upURL, "--policies", pols, "--memory-dir", t.TempDir(),
			"--ledger", "file:"+filepath.Join(t.TempDir(), fmt.Sprintf("l%d.jsonl", i)), "--limits-store", db.URL, "--admin-token", "adm"))
	}
	day := time.Now().UTC().Format("2006-01-02")
	db.Exec(t, `INSERT INTO ctxproxy_spend (tenant, end_user, bucket, spent_nano) VALUES ('capped', '', $1, 990000000)`, day)

	hold := int64((len(capBody)+3)/4*1000 + 100*10000)
	want := int((1_000_000_000 - 990_000_000) / hold)
	type answer struct {
		status int
		typ    string
		header http.Header
	}
	answers := make(chan answer, 50)
	var refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := post(t, replicas[i%2].Addr, capKey, capBody)
			if resp == nil {
				return
			}
			if resp.StatusCode != 200 {
				refused.Add(1)
			}
			answers <- answer{resp.StatusCode, gjson.Get(body, "error.type").Str, resp.Header}
		}()
	}
	eventually(t, "every request answered or waiting upstream", func() {
		for arrived.Load()+refused.Load() < 50 {
			time.Sleep(10 * time.Millisecond)
		}
	})
	close(release)
	wg.Wait()
	close(answers)
	ok := 0
	for a := range answers {
		switch {
		case a.status == 200:
			ok++
			if a.header.Get("Anthropic-Ratelimit-Requests-Remaining") != "" {
				t.Errorf("the upstream's org-wide ratelimit header reached a capped tenant's client")
			}
			if a.header.Get("Anthropic-Ratelimit-Unified-Status") != "allowed_warning" || a.header.Get("Anthropic-Ratelimit-Unified-Overage-Surpassed-Threshold") != "0.95" {
				t.Errorf("unified headers at 99%%: %v", a.header)
			}
		case a.status == 429 && a.typ == "rate_limit_error":
			// In-flight holds took the rest: retry shortly.
		default:
			t.Errorf("answer %d %s", a.status, a.typ)
		}
	}
	if ok != want {
		t.Errorf("admitted %d of 50, want exactly %d (remaining $0.01 / hold $%.6f)", ok, want, float64(hold)/1e9)
	}
	settled(t, db)
	spent := db.QueryInt(t, `SELECT spent_nano FROM ctxproxy_spend WHERE tenant = 'capped' AND end_user = '' AND bucket = $1`, day)
	if wantSpent := int64(990_000_000 + want*60_000); spent != wantSpent {
		t.Errorf("spent after settling = %d nano-USD, want %d (each admitted request's real $0.00006)", spent, wantSpent)
	}
	if n := db.QueryInt(t, `SELECT count(*) FROM ctxproxy_spend_holds`); n != 0 {
		t.Errorf("%d holds left after every request finished", n)
	}

	t.Run("at the cap: 429 billing_error with Claude Code's headers, until the day resets", func(t *testing.T) {
		db.Exec(t, `UPDATE ctxproxy_spend SET spent_nano = 1000000000 WHERE tenant = 'capped' AND bucket = $1`, day)
		resp, body := post(t, replicas[1].Addr, capKey, capBody)
		if resp.StatusCode != 429 || gjson.Get(body, "type").Str != "error" || gjson.Get(body, "error.type").Str != "billing_error" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		msg := gjson.Get(body, "error.message").Str
		if !strings.Contains(msg, "daily spend limit of $1") || !strings.Contains(msg, "resets at") || strings.Contains(msg, capKey) {
			t.Errorf("message %q", msg)
		}
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if ra < 1 || ra > 86400 || resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("retry-after %q, x-should-retry %q", resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"))
		}
		for k, v := range map[string]string{"Status": "rejected", "Overage-Period": "daily", "Overage-Disabled-Reason": "org_spend_cap_reached"} {
			if got := resp.Header.Get("Anthropic-Ratelimit-Unified-" + k); got != v {
				t.Errorf("anthropic-ratelimit-unified-%s = %q, want %q", strings.ToLower(k), got, v)
			}
		}
	})

	t.Run("ctxproxy report and /admin/report show spend against the caps", func(t *testing.T) {
		// An empty ledger: report refuses one that does not exist.
		empty := filepath.Join(t.TempDir(), "none.jsonl")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary(t), "report", "--json", "--ledger", "file:"+empty,
			"--policies", pols, "--limits-store", db.URL).CombinedOutput()
		if err != nil {
			t.Fatalf("report: %v\n%s", err, out)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+replicas[0].Addr+"/admin/report?tenant=capped", nil)
		req.Header.Set("Authorization", "Bearer adm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		admin, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		month := time.Now().UTC().Format("2006-01")
		for name, doc := range map[string]string{"ctxproxy report --json": string(out), "/admin/report": string(admin)} {
			caps := gjson.Get(doc, "caps").Array()
			if len(caps) != 2 {
				t.Errorf("%s: caps = %s", name, gjson.Get(doc, "caps").Raw)
				continue
			}
			if c := caps[0]; c.Get("tenant").Str != "capped" || c.Get("period").Str != "daily" || c.Get("bucket").Str != day ||
				c.Get("spent_usd").Raw != "1.00" || c.Get("cap_usd").Raw != "1.00" || c.Get("utilization").Float() != 1 {
				t.Errorf("%s: daily row %s", name, c.Raw)
			}
			// The monthly counter got only what the requests settled: the seed went to the daily one.
			if c := caps[1]; c.Get("period").Str != "monthly" || c.Get("bucket").Str != month || c.Get("spent_usd").Raw != tokens.Money(want*60_000).String() {
				t.Errorf("%s: monthly row %s", name, c.Raw)
			}
		}
	})
}

// 200 clients burst at once across two replicas against requests_per_minute: 20. The limit
// holds within one request: at least 20 pass, and no more than 20 + 1 + what the allowance
// earned back (one every 3 s) while the burst lasted.
func TestRequestsPerMinuteHoldAcrossReplicasUnderABurst(t *testing.T) {
	cases := []struct {
		name  string
		store func(t *testing.T) []string
	}{
		{"PostgreSQL", func(t *testing.T) []string {
			return []string{"--limits-store", pgtest.New(t, "burst_test").URL}
		}},
		{"Redis (GCRA, go-redis/redis_rate)", func(t *testing.T) []string {
			if err := redisUp(); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("Redis required under CI: %v", err)
				}
				t.Skipf("no Redis: %v", err)
			}
			return []string{"--ratelimit-store", "redis://127.0.0.1:6379/0"}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake, upURL := fakeUpstream(t)
			fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply { return fakeapi.TextReply("ok") })
			// A tenant name no earlier run used: Redis keeps the limiter's state for a minute.
			tenant := fmt.Sprintf("burst-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), i)
			pols := capPolicies(t, tenant)
			args := c.store(t)
			var replicas []*binaries.Process
			for j := range 2 {
				replicas = append(replicas, startProxy(t, append([]string{"--upstream", upURL, "--policies", pols,
					"--memory-dir", t.TempDir(), "--ledger", "file:" + filepath.Join(t.TempDir(), fmt.Sprintf("l%d.jsonl", j))}, args...)...))
			}
			var ok, limited atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for k := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					resp, body := post(t, replicas[k%2].Addr, burstKey, capBody)
					switch {
					case resp == nil:
					case resp.StatusCode == 200:
						ok.Add(1)
					case resp.StatusCode == 429 && gjson.Get(body, "error.type").Str == "rate_limit_error" && resp.Header.Get("Retry-After") != "":
						limited.Add(1)
					default:
						t.Errorf("%d %s", resp.StatusCode, body)
					}
				}()
			}
			began := time.Now()
			close(start)
			wg.Wait()
			earned := int64(time.Since(began) / (3 * time.Second))
			if ok.Load() < 20 || ok.Load() > 21+earned || ok.Load()+limited.Load() != 200 {
				t.Errorf("admitted %d, limited %d of 200 in %s; want 20..%d admitted", ok.Load(), limited.Load(), time.Since(began), 21+earned)
			}
		})
	}
}

// settled waits until every admitted request has settled or released its hold: a request
// settles after its reply reached the client, so a client can be a moment ahead of the store.
func settled(t *testing.T, db *pgtest.DB) {
	t.Helper()
	eventually(t, "every hold settled", func() {
		for db.QueryInt(t, `SELECT count(*) FROM ctxproxy_spend_holds`) != 0 {
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func redisUp() error {
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// The counter store goes away under a running proxy: a tenant with on_store_error: open is served
// unchecked, one with closed gets 429 billing_error (fetch_error); when the database is back both
// are checked again and the spend of requests served from then on is counted once.
func TestLimitsStoreOutage(t *testing.T) {
	db := pgtest.New(t, "limits_outage_test")
	fwd := pgtest.NewForwarder(t, "127.0.0.1:5432")
	url, ok := fwd.URL(db.URL)
	if !ok {
		t.Skip("CTXPROXY_TEST_PG does not point at 127.0.0.1:5432")
	}
	const openKey, closedKey = "sk-ant-limits-open", "sk-ant-limits-closed"
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"open.yaml":   stack.TenantPolicy("open", openKey, "limits:\n  spend: [{period: daily, usd: 10}]\n  on_store_error: open\n"),
		"closed.yaml": stack.TenantPolicy("closed", closedKey, "limits:\n  spend: [{period: daily, usd: 10}]\n  on_store_error: closed\n"),
		"prices.yaml": capPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	fake, upURL := fakeUpstream(t)
	fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply {
		r := fakeapi.TextReply("ok")
		r.Usage = &fakeapi.Usage{InputTokens: 10, OutputTokens: 5}
		return r
	})
	p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"), "--limits-store", url)
	day := time.Now().UTC().Format("2006-01-02")
	spent := func(tenant string) int64 {
		return db.QueryInt(t, `SELECT coalesce(sum(spent_nano), 0) FROM ctxproxy_spend WHERE tenant = $1 AND bucket = $2`, tenant, day)
	}

	fwd.Set("down")
	if resp, body := post(t, p.Addr, openKey, capBody); resp.StatusCode != 200 {
		t.Errorf("open tenant during the outage: %d %s", resp.StatusCode, body)
	}
	resp, body := post(t, p.Addr, closedKey, capBody)
	if resp.StatusCode != 429 || gjson.Get(body, "error.type").Str != "billing_error" ||
		resp.Header.Get("Anthropic-Ratelimit-Unified-Overage-Disabled-Reason") != "fetch_error" {
		t.Errorf("closed tenant during the outage: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// Log lines are flushed each second.
	eventually(t, "the unchecked request logged with its tenant", func() {
		for !strings.Contains(p.Log(), `"msg":"limits store unreachable","tenant":"open"`) {
			time.Sleep(100 * time.Millisecond)
		}
	})

	fwd.Set("up")
	eventually(t, "the closed tenant served again", func() {
		for {
			if resp, _ := post(t, p.Addr, closedKey, capBody); resp != nil && resp.StatusCode == 200 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	settled(t, db)
	before := spent("open")
	if resp, body := post(t, p.Addr, openKey, capBody); resp.StatusCode != 200 {
		t.Fatalf("open tenant after the outage: %d %s", resp.StatusCode, body)
	}
	settled(t, db)
	if got := spent("open") - before; got != 60_000 {
		t.Errorf("a request after the outage added %d nano-USD, want its 60000 once", got)
	}
	if got := spent("closed"); got != 60_000 {
		t.Errorf("the closed tenant's spend = %d, want the one request served after the outage", got)
	}
}

// A policy edit changes a running proxy's limits: a cap too small for any request refuses, the
// raised cap admits, and the change is in the audit log.
func TestLimitsChangeOnReload(t *testing.T) {
	fake, upURL := fakeUpstream(t)
	fake.SetResponder(func(*fakeapi.Request) fakeapi.Reply { return fakeapi.TextReply("ok") })
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"capped.yaml": stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 0.000001}]\n"),
		"prices.yaml": capPrices,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--upstream", upURL, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+filepath.Join(t.TempDir(), "l.jsonl"))
	if resp, body := post(t, p.Addr, capKey, capBody); resp.StatusCode != 429 || gjson.Get(body, "error.type").Str != "billing_error" {
		t.Fatalf("under a $0.000001 cap: %d %s", resp.StatusCode, body)
	}
	policy := stack.TenantPolicy("capped", capKey, "limits:\n  spend: [{period: daily, usd: 1}]\n")
	if err := os.WriteFile(filepath.Join(dir, "capped.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the raised cap in force", func() {
		for {
			if resp, _ := post(t, p.Addr, capKey, capBody); resp != nil && resp.StatusCode == 200 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	eventually(t, "the audit line", func() {
		for !strings.Contains(p.Log(), `"msg":"limits changed","audit":"limits","tenant":"capped","before":"daily $0.000001`) {
			time.Sleep(100 * time.Millisecond)
		}
	})
}
