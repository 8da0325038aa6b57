package main

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ctxproxy/ctxproxy/internal/fakeapi"
	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/shadow"
	"github.com/ctxproxy/ctxproxy/stack"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The policy lab through the built binary against the fake with its prompt cache on: tenant
// "lab" runs clearingPolicy with two shadow candidates measured on every request; tenant
// "twin" runs the same policy without them, for comparison.

const (
	labKey  = "sk-ant-lab-test"
	twinKey = "sk-ant-twin-test"
)

const labShadow = `limits:
  spend: [{period: daily, usd: 1000}]
shadow:
  sample: 1
  max_per_minute: %d
  candidates:
    - name: keep-2
      context_management:
        clear_tool_uses: { trigger: { type: tool_uses, value: 2 }, keep: { type: tool_uses, value: 2 }, exclude_tools: [note] }
    - name: no-edits
      context_management: { mode: off }
`

type labStack struct {
	fake    *fakeapi.API
	addr    string
	metrics string
	ledger  string
	dir     string
}

// startLabStack starts the binary; upstream wraps the fake (nil: the fake itself).
func startLabStack(t *testing.T, perMinute int, wrap func(http.Handler) http.Handler) *labStack {
	t.Helper()
	dir, _, err := stack.Layout(t.TempDir(), map[string]string{
		"lab.yaml":  stack.TenantPolicy("lab", labKey, clearingPolicy+fmt.Sprintf(labShadow, perMinute)),
		"twin.yaml": stack.TenantPolicy("twin", twinKey, clearingPolicy+"limits:\n  spend: [{period: daily, usd: 1000}]\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeapi.New(fakeapi.WithOptions(fakeapi.Options{CacheOptions: fakeapi.CacheOptions{
		Cache: fakeapi.On, MinTokens: map[string]int64{"claude-sonnet-4-5": 1}}}))
	fake.SetResponder(conversationReplies)
	var h http.Handler = fake
	if wrap != nil {
		h = wrap(fake)
	}
	srv := httpTestServer(t, h)
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	p := startProxy(t, "--upstream", srv, "--policies", dir, "--memory-dir", t.TempDir(),
		"--ledger", "file:"+ledger, "--admin-token", "adm", "--debug-addr", "127.0.0.1:0", "--debug-manual-clock")
	// /metrics is on the debug listener without a --metrics-addr of its own.
	return &labStack{fake: fake, addr: p.Addr, metrics: p.Addrs["debug listening"], ledger: ledger, dir: dir}
}

func (s *labStack) lines(t *testing.T, n int) []gjson.Result {
	return (&moneyStack{ledger: s.ledger}).ledgerLines(t, n)
}

// metric is the value of the series name{tenant="lab",candidate=…} on /metrics (0 when absent).
func (s *labStack) metric(t *testing.T, name, candidate string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	re := regexp.MustCompile(`(?m)^` + name + `\{candidate="` + regexp.QuoteMeta(candidate) + `",tenant="lab"\} (\S+)$`)
	m := re.FindSubmatch(b)
	if m == nil {
		return 0
	}
	var v float64
	fmt.Sscan(string(m[1]), &v)
	return v
}

// conversations runs n conversations of 6 calls for key, the first plain ones streamed.
func conversations(t *testing.T, addr, key string, plain, streamed int) []*conversation {
	t.Helper()
	var out []*conversation
	for i := range plain + streamed {
		c := newConversation(key, fmt.Sprintf("task %d", i), i >= plain)
		for range 6 {
			c.call(t, addr)
		}
		out = append(out, c)
	}
	return out
}

var replyID = regexp.MustCompile(`msg_fake_[0-9a-f]+`)

// sameForClients compares what two tenants' clients got, reply ids aside.
func sameForClients(t *testing.T, a, b []*conversation) {
	t.Helper()
	for i := range a {
		for j := range a[i].replies {
			if x, y := replyID.ReplaceAllString(a[i].replies[j], "msg_"), replyID.ReplaceAllString(b[i].replies[j], "msg_"); x != y {
				t.Errorf("conversation %d call %d: the client got\n%s\nwith the lab and\n%s\nwithout", i, j, x, y)
			}
			if ka, kb := headerNames(a[i].headers[j]), headerNames(b[i].headers[j]); !slices.Equal(ka, kb) {
				t.Errorf("conversation %d call %d: headers %v with the lab, %v without", i, j, ka, kb)
			}
		}
	}
}

func headerNames(h http.Header) []string {
	var out []string
	for k := range h {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// countFor is the fake's count_tokens answer for body as candidate name of the lab's policy
// rewrites it.
func countFor(t *testing.T, s *labStack, upstream, name, body string) (in, orig int64) {
	t.Helper()
	pol, err := policy.LoadDirWithoutKeys(filepath.Join(s.dir))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := pol.Tenant("lab").Shadow.Candidate(name)
	if !ok {
		t.Fatalf("no candidate %s", name)
	}
	h := http.Header{}
	out, _, err := c.Policy.Rewrite([]byte(body), h)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, upstream+"/v1/messages/count_tokens", strings.NewReader(string(shadow.CountBody(out))))
	req.Header = h
	req.Header.Set("X-Api-Key", labKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
	}
	in = gjson.GetBytes(b, "input_tokens").Int()
	orig = in
	if o := gjson.GetBytes(b, "context_management.original_input_tokens"); o.Exists() {
		orig = o.Int()
	}
	return in, orig
}

func TestBinaryPolicyLab(t *testing.T) {
	var upstream string
	s := startLabStack(t, 1000, func(h http.Handler) http.Handler {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		upstream = srv.URL
		u, _ := url.Parse(srv.URL)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
			h.ServeHTTP(w, r)
		})
	})
	// 30 calls each: 3 plain conversations and 2 streamed ones.
	lab := conversations(t, s.addr, labKey, 3, 2)
	twin := conversations(t, s.addr, twinKey, 3, 2)
	all := s.lines(t, 30+60+30)
	var real, shadows []gjson.Result
	var twinReal []gjson.Result
	for _, l := range all {
		switch {
		case l.Get("tenant").Str == "twin":
			twinReal = append(twinReal, l)
		case l.Get("endpoint").Str == "shadow":
			shadows = append(shadows, l)
		default:
			real = append(real, l)
		}
	}
	var sent []string
	for _, c := range lab {
		sent = append(sent, c.sent...)
	}

	t.Run("no client reply, status or header changes", func(t *testing.T) {
		sameForClients(t, lab, twin)
	})

	t.Run("every request has exactly one shadow line per candidate, with the fake's count of its rewrite", func(t *testing.T) {
		if len(real) != 30 || len(shadows) != 60 || len(twinReal) != 30 {
			t.Fatalf("%d real lines, %d shadow lines, %d twin lines; want 30, 60, 30", len(real), len(shadows), len(twinReal))
		}
		index := map[string]int{}
		for i, l := range real {
			index[l.Get("request_id").Str] = i
		}
		per := map[string]map[string]int{}
		for _, l := range shadows {
			name, of := l.Get("name").Str, l.Get("shadows").Str
			i, ok := index[of]
			if !ok {
				t.Fatalf("a shadow line shadows %q, no real call's request_id: %s", of, l.Raw)
			}
			if per[of] == nil {
				per[of] = map[string]int{}
			}
			per[of][name]++
			in, orig := countFor(t, s, upstream, name, sent[i])
			if l.Get("input_tokens").Int() != in || l.Get("original_input_tokens").Int() != orig {
				t.Errorf("%s of call %d: input %d, original %d; the fake counts %d, %d", name, i, l.Get("input_tokens").Int(), l.Get("original_input_tokens").Int(), in, orig)
			}
		}
		for id, m := range per {
			if m["keep-2"] != 1 || m["no-edits"] != 1 {
				t.Errorf("call %s measured %v, want once per candidate", id, m)
			}
		}
	})

	t.Run("the tenant's spend, caps and request metrics are unchanged by the lab", func(t *testing.T) {
		sl := &savingsStack{addr: s.addr}
		a, b := sl.reportTotals(t, "lab"), sl.reportTotals(t, "twin")
		if a.Calls != 30 || a.Calls != b.Calls || a.CostUSD != b.CostUSD || a.InputTokens != b.InputTokens {
			t.Errorf("lab's report %d calls $%s, twin's %d calls $%s", a.Calls, a.CostUSD, b.Calls, b.CostUSD)
		}
		spentLab, spentTwin := capSpent(t, s.addr, "lab"), capSpent(t, s.addr, "twin")
		if spentLab != spentTwin || spentLab != a.CostUSD {
			t.Errorf("caps: lab spent %s, twin %s, report %s", spentLab, spentTwin, a.CostUSD)
		}
	})

	t.Run("advise names the cheapest by the estimate's definition, to the cent", func(t *testing.T) {
		want := handEstimates(t, real, shadows)
		out, err := exec.Command(binary(t), "advise", "--tenant", "lab", "--ledger", "file:"+s.ledger, "--policies", s.dir, "--json").Output()
		if err != nil {
			t.Fatalf("advise: %v\n%s", err, out)
		}
		cheapest, best := "", tokens.MaxMoney
		for _, r := range gjson.GetBytes(out, "rows").Array() {
			name := r.Get("policy").Str
			got, err := tokens.ParseMoney(r.Get("estimated_cost_per_1000_usd").Raw)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := want[name]
			if !ok {
				t.Errorf("advise shows %q", name)
				continue
			}
			if r.Get("calls_measured").Int() != 30 || got.Fixed(2) != w.Fixed(2) {
				t.Errorf("%s: %d calls, $%s per 1,000; by hand $%s", name, r.Get("calls_measured").Int(), got, w)
			}
			if w < best {
				cheapest, best = name, w
			}
		}
		if len(gjson.GetBytes(out, "rows").Array()) != 3 {
			t.Fatalf("advise rows: %s", out)
		}
		if v := gjson.GetBytes(out, "verdict"); !v.Get("enough_data").Bool() || v.Get("cheapest").Str != cheapest {
			t.Errorf("verdict %s, want %s cheapest", v.Raw, cheapest)
		}
		c, _ := consoleClient(t, s.addr, "adm")
		resp, err := c.Get("http://" + s.addr + "/admin/ui/tenants/lab")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		verdict := gjson.GetBytes(out, "verdict.text").Str
		for _, want := range []string{"Policy lab", "Cost per 1,000 calls (estimate)", "keep-2", "no-edits", html.EscapeString(verdict), "Cache TTL (estimate)"} {
			if !strings.Contains(string(page), want) {
				t.Errorf("the console's tenant page lacks %q:\n%s", want, page)
			}
		}
		plain, err := exec.Command(binary(t), "advise", "--tenant", "lab", "--ledger", "file:"+s.ledger, "--policies", s.dir).Output()
		if err != nil || !strings.Contains(string(plain), "(estimate)") || !strings.Contains(string(plain), "is cheapest") {
			t.Errorf("advise: %v\n%s", err, plain)
		}
	})
}

// handEstimates is each policy's cost per 1,000 calls by the estimate's definition, from the
// ledger lines alone, at claude-sonnet-4-5's prices.
func handEstimates(t *testing.T, real, shadows []gjson.Result) map[string]tokens.Money {
	t.Helper()
	byID := map[string]gjson.Result{}
	prevOf := map[string]int64{} // request_id → P: the previous call of its conversation
	last := map[string]int64{}
	for _, l := range real {
		id, conv := l.Get("request_id").Str, l.Get("conversation").Str
		byID[id] = l
		prevOf[id] = last[conv]
		last[conv] = cached(l)
	}
	sums := map[string]tokens.Money{}
	cleared := map[string]int64{} // conversation/candidate → cleared′ at its latest measurement
	seen := map[string]bool{}
	for _, l := range real {
		sums[advisorOwn] += money(t, l, "cost_usd")
	}
	// The shadow lines in the order of their calls.
	slices.SortStableFunc(shadows, func(a, b gjson.Result) int {
		return strings.Compare(byID[a.Get("shadows").Str].Get("time").Str, byID[b.Get("shadows").Str].Get("time").Str)
	})
	for _, s := range shadows {
		r := byID[s.Get("shadows").Str]
		name := s.Get("name").Str
		key := r.Get("conversation").Str + "/" + name
		c := s.Get("original_input_tokens").Int() - s.Get("input_tokens").Int()
		newPoint := seen[key] && c > cleared[key]
		seen[key], cleared[key] = true, c
		if s.Get("new_clearing_point").Bool() != newPoint {
			t.Errorf("%s of %s: new_clearing_point %v, by hand %v", name, r.Get("request_id").Str, s.Get("new_clearing_point").Bool(), newPoint)
		}
		T := r.Get("usage.input_tokens").Int() + cached(r)
		isCached := cached(r) > 0
		unit := tokens.Money(sonnetInput)
		if isCached {
			unit = sonnetRead
		}
		est := money(t, r, "cost_usd") - unit*tokens.Money(T-s.Get("input_tokens").Int())
		if newPoint {
			if isCached {
				est += tokens.Money(sonnetWrite-sonnetRead) * tokens.Money(prevOf[r.Get("request_id").Str])
			}
		} else {
			est -= money(t, r, "cache_penalty_usd")
		}
		if got := money(t, s, "estimated_cost_usd"); got != est {
			t.Errorf("%s of %s: estimated_cost_usd %s, by hand %s", name, r.Get("request_id").Str, got, est)
		}
		sums[name] += est
	}
	out := map[string]tokens.Money{}
	for k, v := range sums {
		out[k] = v * 1000 / 30
	}
	return out
}

const advisorOwn = "current policy"

// capSpent is tenant's settled spend against its daily cap, as /admin/report shows it.
func capSpent(t *testing.T, addr, tenant string) tokens.Money {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/report?tenant="+tenant, nil)
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

func TestBinaryPolicyLabMaxPerMinute(t *testing.T) {
	s := startLabStack(t, 2, nil)
	c := newConversation(labKey, "bounded", false)
	for range 10 { // the proxy's clock is manual: the ten requests are in one minute
		c.call(t, s.addr)
	}
	lines := s.lines(t, 10+4)
	per := map[string]int{}
	for _, l := range lines {
		if l.Get("endpoint").Str == "shadow" {
			per[l.Get("name").Str]++
		}
	}
	for _, name := range []string{"keep-2", "no-edits"} {
		if per[name] != 2 {
			t.Errorf("%s measured %d times, want 2", name, per[name])
		}
		if d := s.metric(t, "ctxproxy_shadow_dropped_total", name); d != 8 {
			t.Errorf("%s: ctxproxy_shadow_dropped_total %v, want 8", name, d)
		}
	}
}

func TestBinaryPolicyLabFailuresReachNoClient(t *testing.T) {
	s := startLabStack(t, 1000, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/count_tokens") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(500)
				io.WriteString(w, `{"type":"error","error":{"type":"api_error","message":"count_tokens is down"}}`)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	lab := conversations(t, s.addr, labKey, 1, 1)
	twin := conversations(t, s.addr, twinKey, 1, 1)
	sameForClients(t, lab, twin)
	for _, name := range []string{"keep-2", "no-edits"} {
		eventually(t, name+"'s failures counted", func() {
			for s.metric(t, "ctxproxy_shadow_errors_total", name) != 12 {
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	for _, l := range s.lines(t, 24) {
		if l.Get("endpoint").Str == "shadow" {
			t.Errorf("a shadow line for a failed count: %s", l.Raw)
		}
	}
}
