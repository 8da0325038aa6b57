package limits

import (
	"context"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/policy"
)

// items is n batched requests of 400 bytes (100 input tokens) and max_tokens maxTokens.
func items(n int, maxTokens int64) []policy.BatchItem {
	out := make([]policy.BatchItem, n)
	for i := range out {
		out[i] = policy.BatchItem{Model: "m", MaxTokens: maxTokens, Bytes: 400}
	}
	return out
}

func TestAdmitBatch(t *testing.T) {
	ctx := context.Background()
	t.Run("each request holds what it would alone, at the batch tier's half price", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, dailyCap)
		tk, ref := r.e.AdmitBatch(ctx, pol, "", items(3, 100))
		if ref != nil {
			t.Fatal(ref.Message)
		}
		// (100 input tokens × $1/M + 100 output tokens × $10/M) / 2 = $0.00055 each.
		key, _ := Bucket(policy.Daily, r.now)
		k := counterKey{"acme", "", key}
		if got := r.spend.counters[k].holds[tk.id].amount; got != 3*550_000 {
			t.Errorf("held %s, want 3 × $0.00055", got)
		}
	})
	t.Run("refused whole when the holds do not fit, naming the batch", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, dailyCap)
		// 200 × (100 input tokens + reserve_output_tokens' 4096 output tokens) at half price.
		_, ref := r.e.AdmitBatch(ctx, pol, "", items(200, 32000))
		if ref == nil || ref.Status != 429 || ref.Type != "billing_error" || !strings.Contains(ref.Message, "this batch of 200 requests may cost up to $4.106") {
			t.Fatalf("refusal %+v", ref)
		}
		if len(r.spend.holdKeys) != 0 {
			t.Errorf("holds left: %v", r.spend.holdKeys)
		}
	})
	t.Run("every request counts against requests_per_minute", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, "limits:\n  requests_per_minute: 5\n")
		if _, ref := r.e.AdmitBatch(ctx, pol, "", items(3, 100)); ref != nil {
			t.Fatal(ref.Message)
		}
		_, ref := r.e.AdmitBatch(ctx, pol, "", items(3, 100))
		if ref == nil || ref.Type != "rate_limit_error" || ref.Limit != "requests_per_minute" {
			t.Fatalf("a second batch of 3 under 5 a minute: %+v", ref)
		}
	})
	t.Run("the hold becomes the batch's and its results settle it once", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, dailyCap)
		tk, ref := r.e.AdmitBatch(ctx, pol, "u", items(2, 100))
		if ref != nil {
			t.Fatal(ref.Message)
		}
		r.e.OpenBatch(ctx, tk, Batch{ID: "msgbatch_1", Tenant: "acme", KeyID: "0a1b2c3d"})
		tk.Release(ctx) // what the request does when it ends: the batch keeps its hold
		if len(r.spend.holdKeys) != 1 {
			t.Fatalf("the batch's hold went with its create request: %v", r.spend.holdKeys)
		}
		if c := r.e.ClaimBatch(ctx, "msgbatch_1", "other"); c != nil {
			t.Fatal("another tenant claimed the batch")
		}
		c := r.e.ClaimBatch(ctx, "msgbatch_1", "acme")
		if c == nil || c.KeyID != "0a1b2c3d" || len(c.Counters) != 2 {
			t.Fatalf("claim %+v", c)
		}
		if again := r.e.ClaimBatch(ctx, "msgbatch_1", "acme"); again != nil {
			t.Fatal("claimed twice")
		}
		c.Settle(ctx, 700_000)
		key, _ := Bucket(policy.Daily, r.now)
		got, _ := r.spend.Spent(ctx, "acme", []Counter{{Bucket: key}, {User: "u", Bucket: key}})
		if got[0] != 700_000 || got[1] != 700_000 || len(r.spend.holdKeys) != 0 {
			t.Errorf("spent %v, holds %v", got, r.spend.holdKeys)
		}
	})
	t.Run("a tenant without limits: no ticket, but the batch is remembered for its results", func(t *testing.T) {
		r := newRig(t)
		pol := parsePolicy(t, "")
		tk, ref := r.e.AdmitBatch(ctx, pol, "", items(2, 100))
		if tk != nil || ref != nil {
			t.Fatalf("%v %v", tk, ref)
		}
		r.e.OpenBatch(ctx, nil, Batch{ID: "msgbatch_2", Tenant: "acme"})
		c := r.e.ClaimBatch(ctx, "msgbatch_2", "acme")
		if c == nil || c.Counters != nil {
			t.Fatalf("claim %+v", c)
		}
		c.Settle(ctx, 1) // charges nothing: there is no counter
	})
}
