// Package limits enforces a tenant's spend caps and per-minute limits: it admits a
// request before it goes upstream, holding a bounded reservation of its cost, and settles the
// reservation with the real cost afterwards. The proxy calls only Admit, Ticket.Settle and
// Ticket.Release; the counters live in a SpendStore and a RateStore (memory for one process,
// PostgreSQL or Redis for replicas).
//
// Caps are per tenant and, with the policy's user_from, per end user too (UserOf: the key id, a
// header or the body's metadata.user_id), in calendar periods (Bucket: day, ISO week, month, UTC).
// A Message Batch is admitted whole and paid for when its results pass through (batch.go:
// AdmitBatch, OpenBatch, ClaimBatch). The replies carry the unified rate-limit headers Claude
// Code's gateway protocol reads (headers.go), and a capped tenant's clients never see the
// upstream organisation's anthropic-ratelimit-* headers (HideUpstreamRatelimit). Caps lists what
// is spent against every cap for the reports.
package limits

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// DefaultHoldTTL is how long a reservation lives when its request never settles or releases it
// (the replica died): long enough for a slow memory loop, short enough not to block a tenant long.
const DefaultHoldTTL = 10 * time.Minute

// Config is what an Enforcer needs.
type Config struct {
	Spend   SpendStore
	Rate    RateStore
	Prices  *tokens.Prices
	Metrics *Metrics // nil: none
	Log     *zap.Logger
	HoldTTL time.Duration
	Now     func() time.Time
}

// Enforcer admits, settles and releases requests against their tenant's limits.
type Enforcer struct {
	cfg      Config
	prices   atomic.Pointer[priceTable] // swapped whole when the prices reload
	rateKeys sync.Map                   // rateKeyOf → string (rateKey)
	local    bool                       // the spend store is this process's memory: no call of it blocks
}

// priceTable is the prices in force and the price of models without one: the dearest in the
// table, so a cap holds for a model nobody priced.
type priceTable struct {
	prices   *tokens.Prices
	fallback tokens.Price
}

// New builds an Enforcer.
func New(cfg Config) *Enforcer {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.HoldTTL <= 0 {
		cfg.HoldTTL = DefaultHoldTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Enforcer{cfg: cfg}
	_, e.local = cfg.Spend.(*MemoryStore)
	e.SetPrices(cfg.Prices)
	return e
}

// SetPrices puts a reloaded price table in force for the requests admitted from now on.
func (e *Enforcer) SetPrices(p *tokens.Prices) {
	e.prices.Store(&priceTable{prices: p, fallback: p.Dearest()})
}

// Prices is the price table in force.
func (e *Enforcer) Prices() *tokens.Prices { return e.prices.Load().prices }

// SpendStoreName and RateStoreName say which stores are in use, for the start-up log line.
func (e *Enforcer) SpendStoreName() string { return e.cfg.Spend.Name() }
func (e *Enforcer) RateStoreName() string  { return e.cfg.Rate.Name() }

// Request is what Admit needs to know of a request.
type Request struct {
	Policy    *policy.Policy
	User      string // end user id, "" when the request has none (tenant caps only)
	Model     string
	BodyBytes int   // the size of the body, for the input token estimate
	MaxTokens int64 // the request's max_tokens (0 when absent)
	// Rounds is how many model calls the request may make (max_iterations in memory proxy
	// mode, where max_tokens bounds each call); 0 or 1: one.
	Rounds int64
}

// EstimateInputTokens is the input tokens a body of n bytes is held to before the reply says:
// a quarter of its bytes, rounded up (JSON and English run to about four bytes a token).
func EstimateInputTokens(n int) int64 {
	if n <= 0 {
		return 0
	}
	return int64(n)/4 + min(int64(n)%4, 1) // not (n+3)/4, which wraps for the largest n
}

// Ticket is an admitted request of a limited tenant. Exactly one of Settle and Release takes
// effect; later calls do nothing.
type Ticket struct {
	e        *Enforcer
	tenant   string
	id       string
	counters []Counter
	held     bool   // a reservation is held in the store
	loopID   string // the hold of a memory loop's further rounds, "" when none
	done     atomic.Bool
	header   unified  // the unified headers for every response, none for an uncapped tenant
	idBuf    [24]byte // id's bytes (newID)
	// The counters of a policy with a few caps, in the ticket's own allocation (every
	// admitted request of a capped tenant has some).
	counterBuf [4]Counter
}

// Admit checks req against its tenant's limits. A tenant without limits gets (nil, nil). A
// request over a limit gets a Refusal (and no ticket) to answer with.
func (e *Enforcer) Admit(ctx context.Context, req Request) (*Ticket, *Refusal) {
	pol := req.Policy
	if pol == nil || !pol.Limits.Any() {
		return nil, nil
	}
	input := EstimateInputTokens(req.BodyBytes)
	p, out := e.price(req.Model), OutputHold(&pol.Limits, req.MaxTokens)
	a := admission{requests: 1, input: input, amount: holdAmount(p, input, out), what: "this request"}
	if req.Rounds > 1 {
		// max_tokens bounds each model call: a memory loop's rounds may each write that much.
		a.rounds = holdAmount(p, 0, satMul(out, req.Rounds-1))
	}
	return e.admit(ctx, pol, req.User, a)
}

// satMul is a×b for non-negative a and b, saturating at the largest int64.
func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// admission is what one admission charges: per-minute requests and input tokens, and the
// amount it holds against the caps; what names it in a refusal.
type admission struct {
	requests, input int64
	amount          tokens.Money
	// rounds is what a memory loop's further rounds would hold on top of amount: held as far as
	// the caps leave room once amount is held, never a reason to refuse.
	rounds tokens.Money
	what   string
}

// admit checks a of a tenant with limits, holding a.amount on its spend counters.
func (e *Enforcer) admit(ctx context.Context, pol *policy.Policy, user string, a admission) (*Ticket, *Refusal) {
	l := &pol.Limits
	if ref := e.checkRate(ctx, pol.Tenant, l, a.requests, a.input); ref != nil {
		return nil, ref
	}
	t := &Ticket{e: e, tenant: pol.Tenant}
	t.id = newID(&t.idBuf)
	if !l.Capped() {
		return t, nil
	}
	now := e.cfg.Now()
	var standings [4]standing
	var ss []standing
	t.counters, ss = counters(l, user, now, t.counterBuf[:0], standings[:0])
	res, err := e.cfg.Spend.Reserve(ctx, t.id, t.tenant, t.counters, a.amount, e.cfg.HoldTTL)
	if err != nil {
		if ref := e.storeError(pol, "spend", err); ref != nil {
			return nil, ref
		}
		return t, nil // unchecked; its cost is still settled if the store is back by then
	}
	for i := range ss {
		ss[i].spent = res.Spent[i]
		ss[i].exceeded = ss[i].spent >= ss[i].cap
	}
	if res.Refused >= 0 {
		return nil, e.refuseSpend(pol, ss, res, res.Refused, a.amount, a.what, now)
	}
	t.held = true
	if a.rounds > 0 {
		e.holdRounds(ctx, t, res, a)
	}
	unifiedHeaders(&t.header, binding(ss), now, "")
	e.cfg.Metrics.observeStanding(t.tenant, ss)
	return t, nil
}

// holdRounds holds, under a second id, what a memory loop's further rounds may cost, bounded by
// what the caps left once the request's own hold was taken (res): a loop is admitted by its
// first call, and holds the rest of the cap at most. Another request may take the room in
// between; then the rounds hold nothing more, as before.
func (e *Enforcer) holdRounds(ctx context.Context, t *Ticket, res Reservation, a admission) {
	left := a.rounds
	for i, c := range t.counters {
		left = min(left, c.Cap-res.Spent[i]-res.Reserved[i]-a.amount)
	}
	if left <= 0 {
		return
	}
	id := t.id + "-rounds"
	r, err := e.cfg.Spend.Reserve(ctx, id, t.tenant, t.counters, left, e.cfg.HoldTTL)
	if err == nil && r.Refused < 0 {
		t.loopID = id
	}
}

// OutputHold is the output tokens a request with max_tokens maxTokens (0: absent) holds against
// its tenant's caps: min(max_tokens, reserve_output_tokens).
func OutputHold(l *policy.Limits, maxTokens int64) int64 {
	if maxTokens > 0 {
		return min(l.ReserveOutputTokens, maxTokens)
	}
	return l.ReserveOutputTokens
}

// maxAmount bounds every amount the enforcer holds or charges: twice the largest cap a policy
// takes ($1e9), so a hold that big fits under no cap, and spend + holds + amount stays far from
// int64's end in every store. (PostgreSQL's bigint would fail rather than wrap, and a failed
// check serves an on_store_error: open tenant unchecked.)
const maxAmount = tokens.Money(2_000_000_000_000_000_000)

// bounded is m within [0, maxAmount].
func bounded(m tokens.Money) tokens.Money { return min(max(m, 0), maxAmount) }

// holdAmount is what input and output tokens hold at price p, saturating rather than wrapping
// however large the counts or the price.
func holdAmount(p tokens.Price, input, output int64) tokens.Money {
	return bounded(p.Input.Times(input).Plus(p.Output.Times(output)))
}

// counters appends to cs and ss the spend counters of a request and their standings, sorted
// by (user, bucket), the order every store locks them in.
func counters(l *policy.Limits, user string, now time.Time, cs []Counter, ss []standing) ([]Counter, []standing) {
	add := func(lims []policy.SpendLimit, u string) {
		for _, sl := range lims {
			w := bucketOf(sl.Period, now)
			ss = append(ss, standing{limit: sl, perUser: u != "", cap: tokens.Money(sl.Nanos), reset: w.reset, resetText: w.resetText})
			cs = append(cs, Counter{User: u, Bucket: w.key, Cap: tokens.Money(sl.Nanos)})
		}
	}
	add(l.Spend, "")
	if user != "" {
		add(l.PerUserSpend, user)
	}
	// An insertion sort of both at once: a policy has a few caps.
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && counterLess(&cs[j], &cs[j-1]); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
	return cs, ss
}

func counterLess(a, b *Counter) bool {
	return a.User < b.User || (a.User == b.User && a.Bucket < b.Bucket)
}

func (e *Enforcer) price(model string) tokens.Price {
	t := e.prices.Load()
	if pe, ok := t.prices.Lookup(model); ok {
		return pe.Ceiling()
	}
	return t.fallback
}

// newID is a reservation's id: 96 random bits, from the runtime's generator (ChaCha8, seeded
// from the system's randomness) rather than crypto/rand's system call: an id needs to be
// unique among the replicas sharing a store, not secret. Its text is written into buf, a
// ticket's own array, written once and never again: the string is a view of it rather than an
// allocation of its own (a store that keeps the id keeps the ticket's memory with it).
func newID(buf *[24]byte) string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	hex.Encode(buf[:], b[:])
	return unsafe.String(&buf[0], len(buf))
}

// storeError applies the tenant's on_store_error: open serves the request unchecked (logged and
// counted), closed refuses it.
func (e *Enforcer) storeError(pol *policy.Policy, what string, err error) *Refusal {
	closed := pol.Limits.OnStoreError == policy.StoreErrorClosed
	e.cfg.Metrics.unchecked(pol.Tenant, closed)
	e.cfg.Log.Error("limits store unreachable", zap.String("tenant", pol.Tenant), zap.String("check", what),
		zap.Bool("fail_closed", closed), zap.Error(err))
	if !closed {
		return nil
	}
	return storeRefusal(pol, e.cfg.Now())
}

// Held reports whether the ticket holds a reservation against its tenant's caps. Nil-safe.
func (t *Ticket) Held() bool { return t != nil && t.held }

// Header adds the unified headers to a response of the ticket's tenant (a capped one; see also
// HideUpstreamRatelimit). Nil-safe.
func (t *Ticket) Header(h http.Header) {
	if t == nil {
		return
	}
	t.header.put(h)
}

// Settle charges cost, what the request's upstream calls cost as the ledger priced them (summed
// over every call, each tokens.Prices.Charge), to its counters and drops its reservation.
// Nil-safe.
func (t *Ticket) Settle(ctx context.Context, cost tokens.Money) {
	if t == nil || t.counters == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	t.e.settle(ctx, t.id, t.tenant, t.counters, cost)
	t.releaseRounds(ctx)
}

// releaseRounds drops the hold of a memory loop's further rounds.
func (t *Ticket) releaseRounds(ctx context.Context) {
	if t.loopID == "" {
		return
	}
	ctx, cancel := t.e.storeContext(ctx)
	defer cancel()
	if err := t.e.cfg.Spend.Release(ctx, t.loopID); err != nil {
		t.e.cfg.Log.Warn("spend hold not released; it expires by itself", zap.String("tenant", t.tenant), zap.Error(err))
	}
}

// storeContext is the context of a settle or release: the request is over, its client may be
// gone, but what it spent must still land, within 5 seconds. The memory store never blocks:
// it gets ctx as it is (a timer per request was a sixth of what a settle cost).
func (e *Enforcer) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.local {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// settle charges cost to counters cs of tenant and drops hold id (none when ""). The request is
// over: its client may be gone, but its spend must still land. A store that fails is logged and
// counted, with what the fields say.
func (e *Enforcer) settle(ctx context.Context, id, tenant string, cs []Counter, cost tokens.Money, fields ...zap.Field) {
	cost = bounded(cost)
	ctx, cancel := e.storeContext(ctx)
	defer cancel()
	if err := e.cfg.Spend.Settle(ctx, id, tenant, cs, cost); err != nil {
		e.cfg.Metrics.settleFailed(tenant)
		e.cfg.Log.Error("spend not recorded: limits store unreachable", append([]zap.Field{zap.String("tenant", tenant),
			zap.String("cost_usd", cost.String()), zap.Error(err)}, fields...)...)
	}
}

// Release drops the request's reservation without charging (the request failed before any cost,
// or was cancelled). Nil-safe.
func (t *Ticket) Release(ctx context.Context) {
	if t == nil || !t.held || !t.done.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := t.e.storeContext(ctx)
	defer cancel()
	if err := t.e.cfg.Spend.Release(ctx, t.id); err != nil {
		// The hold expires by itself after the hold TTL.
		t.e.cfg.Log.Warn("spend hold not released; it expires by itself", zap.String("tenant", t.tenant), zap.Error(err))
	}
	t.releaseRounds(ctx)
}
