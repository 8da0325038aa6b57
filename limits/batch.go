package limits

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// A Message Batch is admitted like its requests and paid for when its results come back: the
// proxy never sees its requests run. Its life against the caps:
//   - AdmitBatch, before it goes upstream: each request counts against the per-minute limits
//     and holds what it would alone, at the batch tier's price; the batch is refused whole when
//     the sum does not fit.
//   - OpenBatch, once the upstream created it: the hold becomes the batch's, for BatchHoldTTL,
//     and the store remembers the batch (its tenant, counters and creator) for batchRecordTTL.
//   - ClaimBatch, when its results pass through the proxy (or it is known to have ended with
//     nothing to pay): the first caller, on any replica, gets the batch once, accounts its
//     results and settles its hold with their cost (BatchClaim.Settle); the rest of the hold,
//     what canceled, expired and errored requests and unused output did not spend, is released.
//
// A batch whose results are never fetched through the proxy holds until BatchHoldTTL, then
// nothing: the proxy never learns what it cost.

// BatchHoldTTL is how long a batch's hold lives when its results are not accounted sooner: a
// batch ends within 24 hours of its creation (the API expires what is left then), and an hour is
// left to fetch its results. Results fetched later still settle their cost, on the counters the
// batch was admitted on.
const BatchHoldTTL = 25 * time.Hour

// batchRecordTTL is how long a batch is remembered: its results stay available 29 days after
// its creation.
const batchRecordTTL = 30 * 24 * time.Hour

// Batch is a Message Batch created through the proxy, as the limits store remembers it.
type Batch struct {
	ID, Tenant string
	HoldID     string    // the hold of its requests; "" when it holds nothing
	Counters   []Counter // the counters its cost is charged to; nil for a tenant without caps
	KeyID      string    // the key that created it, and that key's ctxproxy user: its ledger lines'
	User       string
}

// BatchStore remembers the batches created through the proxy. Every SpendStore is one, so the
// replicas sharing spend counters share batches.
type BatchStore interface {
	// OpenBatch records b for recordTTL (dropping records past theirs) and keeps its hold
	// (b.HoldID) for holdTTL from now.
	OpenBatch(ctx context.Context, b Batch, holdTTL, recordTTL time.Duration) error
	// CloseBatch takes the record of batch id of tenant once: the first call gets it (true),
	// every later one, and one for a batch never recorded or past its record, gets false.
	CloseBatch(ctx context.Context, id, tenant string) (Batch, bool, error)
}

// AdmitBatch checks a Message Batch of tenant pol against its limits as its requests (items):
// each counts against requests_per_minute and input_tokens_per_minute, and holds what it would
// hold alone at the price table's batch factor; the batch is refused whole when their sum does
// not fit. user is the batch's end user for per-user caps. A tenant without limits gets (nil,
// nil).
func (e *Enforcer) AdmitBatch(ctx context.Context, pol *policy.Policy, user string, items []policy.BatchItem) (*Ticket, *Refusal) {
	if pol == nil || !pol.Limits.Any() {
		return nil, nil
	}
	l := &pol.Limits
	tier := e.Prices().Factors().Batch
	var input int64
	var amount tokens.Money
	for _, it := range items {
		in := EstimateInputTokens(it.Bytes)
		input += in // at most the body's size: no overflow
		amount = amount.Plus(tier.Apply(holdAmount(e.price(it.Model), in, OutputHold(l, it.MaxTokens))))
	}
	what := fmt.Sprintf("this batch of %d requests", len(items))
	return e.admit(ctx, pol, user, admission{requests: int64(len(items)), input: input, amount: bounded(amount), what: what})
}

// OpenBatch records batch b, just created upstream, with what its ticket t (nil for a tenant
// without limits) holds: the hold becomes the batch's until its results are accounted or
// BatchHoldTTL passes, and the ticket no longer releases it. A store that fails is logged; the
// hold then expires like a request's.
func (e *Enforcer) OpenBatch(ctx context.Context, t *Ticket, b Batch) {
	if t != nil && t.done.CompareAndSwap(false, true) {
		b.Counters = t.counters
		if t.held {
			b.HoldID = t.id
		}
	}
	ctx, cancel := e.storeContext(ctx)
	defer cancel()
	if err := e.cfg.Spend.OpenBatch(ctx, b, BatchHoldTTL, batchRecordTTL); err != nil {
		e.cfg.Log.Error("batch not recorded: its results will not be accounted", zap.String("tenant", b.Tenant),
			zap.String("batch", b.ID), zap.Error(err))
	}
}

// BatchClaim is a batch taken once to account its results.
type BatchClaim struct {
	Batch
	e *Enforcer
}

// ClaimBatch takes batch id of tenant to account its results, once across every replica: it
// returns nil when the batch was not created through the proxy, was claimed before, or its
// record has expired (then whoever holds it accounts it, or nobody does), or the store fails
// (logged).
func (e *Enforcer) ClaimBatch(ctx context.Context, id, tenant string) *BatchClaim {
	ctx, cancel := e.storeContext(ctx)
	defer cancel()
	b, ok, err := e.cfg.Spend.CloseBatch(ctx, id, tenant)
	if err != nil {
		e.cfg.Log.Error("batch results not accounted: limits store unreachable", zap.String("tenant", tenant),
			zap.String("batch", id), zap.Error(err))
		return nil
	}
	if !ok {
		return nil
	}
	return &BatchClaim{Batch: b, e: e}
}

// Settle charges cost, what the batch's results cost as the ledger priced them, to the counters
// it was admitted on, and drops its hold: what it held beyond its cost is released.
func (c *BatchClaim) Settle(ctx context.Context, cost tokens.Money) {
	if c.Counters == nil && c.HoldID == "" {
		return
	}
	c.e.settle(ctx, c.HoldID, c.Tenant, c.Counters, cost, zap.String("batch", c.ID))
}
