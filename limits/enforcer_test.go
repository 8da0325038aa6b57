package limits

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// $1 per million input tokens, $10 per million output: 1000 nano-USD and 10000 per token.
const testPrices = `models:
  - model: m
    input: 1
    output: 10
    cache_write: 1.25
    cache_read: 0.1
`

func parsePolicy(t *testing.T, yaml string) *policy.Policy {
	t.Helper()
	p, err := parsePolicyB(t, yaml)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func parsePolicyB(_ testing.TB, yaml string) (*policy.Policy, error) {
	return policy.Parse("acme.yaml", []byte("tenant: acme\n"+yaml))
}

// limitsYAML is every kind of limit, far above what a test or benchmark spends.
const limitsYAML = `limits:
  spend: [{period: daily, usd: 1000000}, {period: monthly, usd: 1000000}]
  per_user_spend: [{period: daily, usd: 1000000}]
  requests_per_minute: 1000000000
  input_tokens_per_minute: 1000000000
`

type rig struct {
	e     *Enforcer
	spend *MemoryStore
	now   time.Time
	reg   *prometheus.Registry
}

func newRig(t *testing.T) *rig {
	t.Helper()
	prices, err := tokens.ParsePrices([]byte(testPrices))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{spend: NewMemoryStore(), now: time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC), reg: prometheus.NewRegistry()}
	r.e = New(Config{Spend: r.spend, Rate: NewMemoryRate(), Prices: prices, Metrics: NewMetrics(r.reg), Now: func() time.Time { return r.now }})
	return r
}

// charge settles cost on the tenant's daily counter outside any request.
func (r *rig) charge(t *testing.T, user string, cost tokens.Money) {
	t.Helper()
	key, _ := Bucket(policy.Daily, r.now)
	if err := r.spend.Settle(context.Background(), "seed", "acme", []Counter{{User: user, Bucket: key}}, cost); err != nil {
		t.Fatal(err)
	}
}

const dailyCap = "limits:\n  spend: [{period: daily, usd: 1}]\n  per_user_spend: [{period: daily, usd: 0.5}]\n"

// A request of 400 bytes with max_tokens 100 holds 100 input tokens ($0.0001) + 100 output
// tokens ($0.001) = $0.0011.
func smallRequest(pol *policy.Policy, user string) Request {
	return Request{Policy: pol, User: user, Model: "m", BodyBytes: 400, MaxTokens: 100}
}

func TestAdmitUnderTheCap(t *testing.T) {
	cases := []struct {
		name        string
		spentCents  int64
		wantHeaders map[string]string
	}{
		{"far under the cap: allowed, no threshold", 10, map[string]string{
			HeaderStatus: "allowed", HeaderClaim: "overage", HeaderOverStatus: "allowed", HeaderOverUtil: "0.1",
			HeaderReset: "1796342400", HeaderOverReset: "1796342400", HeaderOverThresh: ""}},
		{"past 75%: allowed_warning at 0.75", 80, map[string]string{
			HeaderStatus: "allowed_warning", HeaderOverStatus: "allowed_warning", HeaderOverUtil: "0.8", HeaderOverThresh: "0.75"}},
		{"past 95%: the 0.95 threshold, utilisation shown below 1", 99.0, map[string]string{
			HeaderStatus: "allowed_warning", HeaderOverUtil: "0.99", HeaderOverThresh: "0.95", HeaderOverReason: ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			pol := parsePolicy(t, dailyCap)
			r.charge(t, "", usd(c.spentCents))
			tk, ref := r.e.Admit(context.Background(), smallRequest(pol, ""))
			if ref != nil || tk == nil {
				t.Fatalf("Admit = %v, %+v", tk, ref)
			}
			h := http.Header{"Anthropic-Ratelimit-Requests-Remaining": {"4999"}, "Request-Id": {"req_1"}}
			HideUpstreamRatelimit(pol, h)
			tk.Header(h)
			for k, want := range c.wantHeaders {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if h.Get("Anthropic-Ratelimit-Requests-Remaining") != "" || h.Get("Request-Id") != "req_1" {
				t.Errorf("the upstream's org-wide ratelimit headers must go and the rest stay: %v", h)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	t.Run("the settled spend leaves no room: billing_error until the period resets", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, dailyCap)
		r.charge(t, "", usd(100)-usd(1)/10) // $0.999 spent of $1: $0.0011 does not fit
		_, ref := r.e.Admit(context.Background(), smallRequest(pol, ""))
		if ref == nil {
			t.Fatal("admitted")
		}
		if ref.Status != 429 || ref.Type != "billing_error" || ref.Limit != "daily" {
			t.Errorf("refusal = %d %s %s", ref.Status, ref.Type, ref.Limit)
		}
		if !strings.Contains(ref.Message, "daily spend limit of $1") || !strings.Contains(ref.Message, "resets at 2026-12-04T00:00:00Z") {
			t.Errorf("message = %q", ref.Message)
		}
		want := map[string]string{"Retry-After": "21600", HeaderShouldRetry: "false", HeaderStatus: "rejected",
			HeaderOverPeriod: "daily", HeaderOverReason: "org_spend_cap_reached", HeaderOverThresh: "1", HeaderOverUtil: "1",
			HeaderClaim: "", HeaderOverStatus: ""}
		for k, v := range want {
			if got := ref.Header.Get(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		if got := testutil.ToFloat64(r.e.cfg.Metrics.refusals.WithLabelValues("acme", "daily")); got != 1 {
			t.Errorf("refusals{daily} = %v", got)
		}
	})
	t.Run("a user over their own cap is refused while others of the tenant are served", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, dailyCap)
		r.charge(t, "0a1b2c3d", usd(50))
		_, ref := r.e.Admit(context.Background(), smallRequest(pol, "0a1b2c3d"))
		if ref == nil || ref.Type != "billing_error" || !strings.Contains(ref.Message, "tenant acme's per-user daily spend limit of $0.5") {
			t.Fatalf("refusal = %+v", ref)
		}
		if strings.Contains(ref.Message, "0a1b2c3d") {
			t.Errorf("the message names the user's key id: %q", ref.Message)
		}
		if tk, ref := r.e.Admit(context.Background(), smallRequest(pol, "99999999")); ref != nil || tk == nil {
			t.Fatalf("another user: %+v", ref)
		}
		if tk, ref := r.e.Admit(context.Background(), smallRequest(pol, "")); ref != nil || tk == nil {
			t.Fatalf("a request without a user: %+v", ref)
		}
	})
	t.Run("requests in flight hold the rest: rate_limit_error, retry shortly", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, dailyCap)
		r.charge(t, "", usd(99)+usd(1)/2) // $0.995: room for four holds of $0.0011 and not five
		for i := range 4 {
			if _, ref := r.e.Admit(context.Background(), smallRequest(pol, "")); ref != nil {
				t.Fatalf("request %d refused: %s", i, ref.Message)
			}
		}
		_, ref := r.e.Admit(context.Background(), smallRequest(pol, ""))
		if ref == nil || ref.Type != "rate_limit_error" || ref.Header.Get("Retry-After") != "5" || ref.Header.Get(HeaderShouldRetry) != "" {
			t.Fatalf("fifth = %+v", ref)
		}
	})
	t.Run("requests_per_minute: the burst passes, the next is refused with retry-after", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, "limits:\n  requests_per_minute: 2\n")
		for range 2 {
			tk, ref := r.e.Admit(context.Background(), smallRequest(pol, ""))
			if ref != nil {
				t.Fatal(ref.Message)
			}
			h := http.Header{"Anthropic-Ratelimit-Requests-Remaining": {"1"}}
			HideUpstreamRatelimit(pol, h)
			tk.Header(h)
			if h.Get("Anthropic-Ratelimit-Requests-Remaining") != "1" || h.Get(HeaderStatus) != "" {
				t.Errorf("an uncapped tenant's headers are the upstream's: %v", h)
			}
		}
		_, ref := r.e.Admit(context.Background(), smallRequest(pol, ""))
		if ref == nil || ref.Type != "rate_limit_error" || ref.Header.Get("Retry-After") != "30" ||
			!strings.Contains(ref.Message, "requests_per_minute limit of 2") {
			t.Fatalf("third = %+v", ref)
		}
	})
}

func TestSettleChargesTheRealCostOnce(t *testing.T) {
	r := newRig(t)
	pol := parsePolicy(t, dailyCap)
	tk, ref := r.e.Admit(context.Background(), smallRequest(pol, "u"))
	if ref != nil {
		t.Fatal(ref.Message)
	}
	tk.Settle(context.Background(), usd(1)/5) // $0.002
	tk.Settle(context.Background(), usd(1)/10)
	tk.Release(context.Background())
	key, _ := Bucket(policy.Daily, r.now)
	got, _ := r.spend.Spent(context.Background(), "acme", []Counter{{Bucket: key}, {User: "u", Bucket: key}})
	if got[0] != usd(1)/5 || got[1] != usd(1)/5 {
		t.Errorf("spent = %v, want $0.002 on the tenant and the user", got)
	}
	if len(r.spend.holdKeys) != 0 {
		t.Errorf("holds left: %v", r.spend.holdKeys)
	}
}

// failingStore is a SpendStore and RateStore whose every call fails, as an unreachable one does.
type failingStore struct{}

var errDown = errors.New("connection refused")

func (failingStore) Reserve(context.Context, string, string, []Counter, tokens.Money, time.Duration) (Reservation, error) {
	return Reservation{}, errDown
}
func (failingStore) Settle(context.Context, string, string, []Counter, tokens.Money) error {
	return errDown
}
func (failingStore) Release(context.Context, string) error { return errDown }
func (failingStore) Spent(context.Context, string, []Counter) ([]tokens.Money, error) {
	return nil, errDown
}
func (failingStore) UserSpend(context.Context, string, string) (map[string]tokens.Money, error) {
	return nil, errDown
}
func (failingStore) Name() string { return "down" }
func (failingStore) OpenBatch(context.Context, Batch, time.Duration, time.Duration) error {
	return errDown
}
func (failingStore) CloseBatch(context.Context, string, string) (Batch, bool, error) {
	return Batch{}, false, errDown
}
func (failingStore) Take(context.Context, string, int64, int64) (bool, time.Duration, error) {
	return false, 0, errDown
}

func TestStoreDown(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run("on_store_error "+mode, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := New(Config{Spend: failingStore{}, Rate: failingStore{}, Metrics: NewMetrics(reg)})
			pol := parsePolicy(t, dailyCap+"  requests_per_minute: 5\n  on_store_error: "+mode+"\n")
			tk, ref := e.Admit(context.Background(), smallRequest(pol, ""))
			if mode == "open" {
				if ref != nil || tk == nil {
					t.Fatalf("open: %+v", ref)
				}
				tk.Settle(context.Background(), 1000)
				if got := testutil.ToFloat64(e.cfg.Metrics.storeErrs.WithLabelValues("acme", "served_unchecked")); got != 2 {
					t.Errorf("unchecked = %v, want 2 (the rate check and the spend check)", got)
				}
				return
			}
			if ref == nil || ref.Type != "billing_error" || ref.Header.Get(HeaderOverReason) != "fetch_error" || ref.Header.Get(HeaderShouldRetry) != "false" {
				t.Fatalf("closed: %+v", ref)
			}
		})
	}
}

// No count or price makes a hold wrap around int64 to an amount that fits under the cap.
func TestHoldsSaturateInsteadOfWrapping(t *testing.T) {
	prices, err := tokens.ParsePrices([]byte("models:\n  - model: m\n    input: 1\n    output: 9000000000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		req  func(pol *policy.Policy) Request
	}{
		{"4096 output tokens at $9e12 per million", func(pol *policy.Policy) Request {
			return Request{Policy: pol, Model: "m", BodyBytes: 400, MaxTokens: 4096}
		}},
		{"a max_tokens past int64's reach, bounded by reserve_output_tokens", func(pol *policy.Policy) Request {
			return Request{Policy: pol, Model: "m", BodyBytes: 400, MaxTokens: 1 << 62}
		}},
		{"a body as large as int allows", func(pol *policy.Policy) Request {
			return Request{Policy: pol, Model: "unpriced", BodyBytes: int(^uint(0) >> 1), MaxTokens: 1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spend := NewMemoryStore()
			e := New(Config{Spend: spend, Rate: NewMemoryRate(), Prices: prices})
			pol := parsePolicy(t, dailyCap)
			_, ref := e.Admit(context.Background(), c.req(pol))
			if ref == nil || ref.Type != "billing_error" {
				t.Fatalf("admitted past a $1 cap: %+v", ref)
			}
			if len(spend.holdKeys) != 0 {
				t.Errorf("holds: %v", spend.holdKeys)
			}
		})
	}
	if got := OutputHold(&policy.Limits{ReserveOutputTokens: 4096}, 1<<62); got != 4096 {
		t.Errorf("OutputHold = %d, want reserve_output_tokens", got)
	}
}

// TestUnifiedHeaderNamesAreCanonical: unifiedHeaders writes the names into the header map
// as they are, so each must be the form net/http reads (Header.Get canonicalises the name it
// looks up).
func TestUnifiedHeaderNamesAreCanonical(t *testing.T) {
	for _, k := range []string{HeaderStatus, HeaderReset, HeaderClaim, HeaderOverStatus, HeaderOverUtil, HeaderOverReset,
		HeaderOverThresh, HeaderOverPeriod, HeaderOverReason, "Retry-After"} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is not canonical: %q", k, c)
		}
	}
}

// heldNow sums the unexpired holds on the tenant's daily counter.
func (r *rig) heldNow() tokens.Money {
	r.spend.mu.Lock()
	defer r.spend.mu.Unlock()
	key, _ := Bucket(policy.Daily, r.now)
	var sum tokens.Money
	mc := r.spend.counters[counterKey{"acme", "", key}]
	if mc == nil {
		return 0
	}
	for _, h := range mc.holds {
		sum = sum.Plus(h.amount)
	}
	return sum
}

// max_tokens bounds each model call, so a memory loop's request holds its rounds too:
// max_iterations × the output hold, as far as the cap leaves room, never refused for them.
func TestAMemoryLoopHoldsItsRoundsBoundedByWhatTheCapLeaves(t *testing.T) {
	const capOnly = "limits:\n  spend: [{period: daily, usd: 1}]\n"
	loop := func(pol *policy.Policy) Request {
		req := smallRequest(pol, "")
		req.Rounds = 10
		return req
	}
	t.Run("far under the cap: the first call's hold and nine more rounds of output", func(t *testing.T) {
		r := newRig(t)
		tk, ref := r.e.Admit(context.Background(), loop(parsePolicy(t, capOnly)))
		if ref != nil {
			t.Fatal(ref.Message)
		}
		// $0.0011 + 9 × 100 output tokens at $10/M ($0.009).
		if got, want := r.heldNow(), tokens.Money(1_100_000+9_000_000); got != want {
			t.Errorf("held %s, want %s", got, want)
		}
		tk.Settle(context.Background(), tokens.Money(500_000))
		if got := r.heldNow(); got != 0 {
			t.Errorf("held %s after settling", got)
		}
	})
	t.Run("near the cap: the rounds hold what is left, and the request is admitted", func(t *testing.T) {
		r := newRig(t)
		r.charge(t, "", tokens.Money(995_000_000)) // $0.995 of the $1 cap
		tk, ref := r.e.Admit(context.Background(), loop(parsePolicy(t, capOnly)))
		if ref != nil {
			t.Fatal(ref.Message)
		}
		if got, want := r.heldNow(), tokens.Money(5_000_000); got != want {
			t.Errorf("held %s, want the %s the cap left", got, want)
		}
		// A second request finds the cap held to the last nano-dollar.
		if _, ref := r.e.Admit(context.Background(), smallRequest(parsePolicy(t, capOnly), "")); ref == nil {
			t.Error("a second request fits under a cap the loop holds")
		}
		tk.Release(context.Background())
		if got := r.heldNow(); got != 0 {
			t.Errorf("held %s after release", got)
		}
	})
	t.Run("one round: the hold of one call", func(t *testing.T) {
		r := newRig(t)
		req := loop(parsePolicy(t, capOnly))
		req.Rounds = 1
		if _, ref := r.e.Admit(context.Background(), req); ref != nil {
			t.Fatal(ref.Message)
		}
		if got, want := r.heldNow(), tokens.Money(1_100_000); got != want {
			t.Errorf("held %s, want %s", got, want)
		}
	})
}
