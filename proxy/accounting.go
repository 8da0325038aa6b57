package proxy

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/shadow"
	"github.com/ctxproxy/ctxproxy/tokens"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// accounting is what serving one client request cost upstream. Each field
// has one writer: calls callUpstream, upDur and replied waited, roundDur sending (upstream.go),
// memCmds memoryCommand (memory.go), refusedEdits resendWithout, the rest record.
type accounting struct {
	calls   int           // upstream calls (a call's retries count once)
	upDur   time.Duration // time spent waiting on the upstream
	replied time.Time     // when the last call's reply was read
	// roundDur is the proxy's own time in its memory rounds: from each round's reply read to
	// the next round's call begun (the memory commands, the reply's accounting, the next
	// request built), summed. Sending that request, its body included, is upstream time, as
	// for the first call: the request log's memory_rounds_duration.
	roundDur time.Duration
	memCmds  int          // memory commands run
	usage    tokens.Usage // top-level usage summed over the calls
	// cost is what the calls were billed, each as its ledger line prices it
	// (tokens.Prices.Charge): what a capped tenant's counters are charged.
	cost tokens.Money
	// iterations are the calls' usage.iterations in order (nil when none had
	// any): a client handed several calls as one message gets them all.
	iterations []tokens.Iteration
	// measures are the compactions to measure once the client has its reply.
	measures []compactionMeasure
	// refusedEdits are the edits the policy added that the upstream refused, the request
	// resent without them (editrefused.go, their one writer); the refused calls are in calls.
	refusedEdits []string
}

// waited adds the time since t0 to the upstream time: a call's time runs
// from sending it until its reply was read.
func (a *accounting) waited(t0 time.Time) {
	a.replied = time.Now()
	a.upDur += a.replied.Sub(t0)
}

// record accounts one upstream call's usage and applied edits; meta is what
// the reply said of itself (for the call's span). The ledger gets what the
// call was billed for: every usage.iterations entry (the top-level usage
// leaves out compaction), each priced at its own model.
func (x *exchange) record(resp *http.Response, r tokens.Reply, meta replyMeta) {
	x.acct.usage.Add(r.Usage)
	if r.Iterations != nil {
		x.acct.iterations = append(x.acct.iterations, r.Iterations...)
		if m, ok := x.measureOf(resp.StatusCode, r); ok {
			x.acct.measures = append(x.acct.measures, m)
		}
	}
	c := x.ledgerCall(resp)
	c.Stream = x.req.info.Stream
	c.Usage = r.Billed()
	c.Iterations = r.Iterations
	c.ServiceTier = r.ServiceTier
	c.Edits = r.Edits
	c.Transformations = r.Transformations
	c.Cut = r.Cut
	x.attributeCache(&c, &r)
	c = x.s.ledger(x.r.Context(), c)
	if x.ticket != nil {
		x.acct.cost = x.acct.cost.Plus(x.s.charge(&c))
	}
	x.endCallSpan(&c, meta)
	x.shadowCall(&c) // last: the lab gets the line as the ledger priced it, and accounting is done
}

// shadowCall hands the lab the request's first upstream call, c as its ledger line priced it.
// Later calls (the memory loop's next rounds) are not measured. The lab's hook at the end of a
// call's accounting (shadow.go opens the sample), it lives here, by the one call that makes it.
func (x *exchange) shadowCall(c *tokens.Call) {
	r := x.shadow.req
	if r == nil {
		return
	}
	x.shadow.req = nil
	if c.Status != 200 || x.req.info.Threaded {
		return
	}
	r.Header = x.req.header.Clone()
	tracing.KeepClientTrace(r.Header, x.r.Header) // not the last call's traceparent: the shadow is no child of it
	x.s.cfg.Lab.Measure(r, shadow.Shadowed{Call: *c, Conversation: c.Conversation, PrevCached: x.conv.prevCached})
}

// attributeCache fills c's cache fields from the conversation's previous call, and makes this
// call the previous one: the next round of a memory loop, or the client's next request.
func (x *exchange) attributeCache(c *tokens.Call, r *tokens.Reply) {
	v, t := &x.conv, x.s.cfg.CacheTracker
	if !v.on || c.Status != 200 {
		return
	}
	call := cachetrack.Call{At: t.Now(), Model: x.req.info.Model, System: v.system, Tools: v.tools,
		CacheRead: r.Usage.CacheReadInputTokens, CacheCreation: r.Usage.CacheCreationInputTokens,
		CacheCreation1h: r.Usage.CacheCreation1hInputTokens, MessageID: r.ID, Diagnosis: missReason(v.seen.diagnosis)}
	for _, e := range r.Edits {
		call.ClearedToolUses += e.ClearedToolUses
		call.ClearedThinkingTurns += e.ClearedThinkingTurns
	}
	var prev *cachetrack.Prev
	v.prevCached = 0
	if v.known {
		prev, v.prevCached = &v.prev, v.prev.Cached
	}
	verdict := cachetrack.Attribute(prev, &call)
	c.CacheMissedInputTokens, c.CacheMissCause = verdict.Missed, verdict.Cause
	c.CacheEffect = tokens.CacheUnknown
	if verdict.Known {
		c.CacheEffect = tokens.CacheMeasured
	}
	v.prev, v.known = cachetrack.Next(prev, &call), true
	c.Conversation = v.prev.Conversation
	t.Store(v.seen.turn, v.prev)
	if x.req.info.Threaded {
		// Only a thread is continued by its reply's id: a key per reply for every other
		// conversation would only fill the tracker (and the collector's work) with keys never
		// looked up.
		t.Store(cachetrack.MessageKey(v.scope, r.ID), v.prev)
	}
	v.seen = seenReply{}
}

// missReason is a cache_miss_reason.type as a ledger line names it: one of the API's known
// types, or "other".
func missReason(t string) string {
	switch t {
	case "":
		return ""
	case "messages_changed", "system_changed", "tools_changed", "model_changed", "previous_message_not_found", "unavailable":
		return t
	default:
		return "other"
	}
}

// ledger prices c and records it (ledger line and metrics); without a
// Recorder it is only priced, at the limits' prices, for the caps.
func (s *Server) ledger(ctx context.Context, c tokens.Call) tokens.Call {
	if rec := s.cfg.Recorder; rec != nil {
		return rec.Record(ctx, c)
	}
	if s.cfg.Limits != nil {
		s.cfg.Limits.Prices().Price(&c)
	}
	return c
}

// charge is what the spend caps are charged for c as ledger priced it:
// exactly its ledger line's cost (tokens.Prices.Charge).
func (s *Server) charge(c *tokens.Call) tokens.Money {
	if rec := s.cfg.Recorder; rec != nil {
		return rec.CurrentPrices().Charge(c)
	}
	if s.cfg.Limits != nil {
		return s.cfg.Limits.Prices().Charge(c)
	}
	return 0
}

// recordCount puts a count_tokens reply in the ledger: input_tokens after
// the policy's edits and original_input_tokens before, billed nothing.
func (x *exchange) recordCount(resp *http.Response, body []byte) {
	rec := x.s.cfg.Recorder
	if x.ep != epCountTokens || rec == nil || resp.StatusCode != http.StatusOK {
		return
	}
	ct := tokens.ParseCountTokens(body)
	c := x.ledgerCall(resp)
	c.CountTokens = &ct
	rec.Record(x.r.Context(), c)
}

// ledgerLine is the base of every ledger line the proxy writes: who asked
// (tenant, key id, user), for which model, and what the upstream answered.
// Every line starts from it (an exchange's through ledgerCall, a batch
// result's in resultsMeter.account), so none lacks what a report groups by.
func ledgerLine(tenant, keyID, user, model, requestID string, status int) tokens.Call {
	return tokens.Call{
		Time:      time.Now(),
		Tenant:    tenant,
		KeyID:     keyID,
		User:      user,
		Model:     model,
		RequestID: requestID,
		Status:    status,
	}
}

// ledgerCall is the base of the exchange's ledger lines: its caller and
// model, and what the upstream call resp answered.
func (x *exchange) ledgerCall(resp *http.Response) tokens.Call {
	return ledgerLine(x.who.label, x.who.keyID, x.who.user, x.req.info.Model, resp.Header.Get("Request-Id"), resp.StatusCode)
}

// finish writes the request's log line and metrics.
func (x *exchange) finish() {
	defer x.measureCompactions() // after the log line: the client has its reply
	x.settle()
	x.endSpans()
	led := x.in.lead.led()
	x.in.lead.drop()
	x.in.lease.release()
	d := time.Since(x.start)
	if m := x.s.cfg.Metrics; m != nil {
		m.ObserveRequest(x.who.label, x.req.info.Model, x.out.status, x.acct.upDur, max(d-x.acct.upDur, 0))
		if x.out.status >= 400 {
			m.ObserveError(x.who.label, x.out.status, x.out.errType, x.out.errCode)
		}
	}
	if ce := x.s.log.Check(zap.InfoLevel, "request"); ce != nil {
		rounds := zap.Skip()
		if x.acct.calls > 1 {
			rounds = zap.Duration("memory_rounds_duration", x.acct.roundDur)
		}
		ce.Write(
			zap.String("tenant", x.who.label),
			zap.String("key", x.who.keyID),
			zap.String("path", x.r.URL.Path),
			zap.String("model", x.req.info.Model),
			zap.Bool("stream", x.req.info.Stream),
			zap.Int("status", x.out.status),
			zap.Duration("duration", d),
			zap.Duration("upstream_duration", x.acct.upDur),
			zap.Int("upstream_calls", x.acct.calls),
			rounds,
			zap.Int("memory_commands", x.acct.memCmds),
			zap.Int64("bytes_in", x.in.n),
			zap.Bool("forwarded_while_reading", led),
			zap.Int64("bytes_out", x.out.n),
			zap.Strings("edits", x.req.info.Edits),
			zap.Strings("edits_refused", x.acct.refusedEdits),
			zap.Int64("input_tokens", x.acct.usage.InputTokens),
			zap.Int64("output_tokens", x.acct.usage.OutputTokens),
		)
	}
}

// drop cuts an upload (lead.go) no upstream call took (none does so today). It and led live
// here, by finish, their one caller.
func (u *leadUpload) drop() {
	if u != nil && !u.taken {
		u.abort()
	}
}

// led says whether the request's first upstream call was the upload's: its body went while it
// arrived.
func (u *leadUpload) led() bool { return u != nil && u.answered }

// settle charges what the request cost (every upstream call of it, memory rounds included, each
// at its ledger line's cost), or releases its reservation when it cost nothing.
func (x *exchange) settle() {
	t := x.ticket
	if t == nil {
		return
	}
	if x.acct.cost == 0 { // no call, an error, a cancel, or a reply with no usage
		t.Release(x.r.Context())
		return
	}
	t.Settle(x.r.Context(), x.acct.cost)
}

// endCallSpan ends the call's span with what its reply and accounting said.
func (x *exchange) endCallSpan(c *tokens.Call, m replyMeta) {
	sp := x.spans.call
	x.spans.call = tracing.Span{}
	if !sp.Recording() {
		sp.End()
		return
	}
	r := tracing.ChatResponse{
		Status: c.Status, ID: m.id, Model: m.model, StopReason: m.stopReason,
		InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens,
		CacheRead: c.Usage.CacheReadInputTokens, CacheCreation: c.Usage.CacheCreationInputTokens,
		CostUSD: c.Cost.USD(), OutputMessages: m.content,
	}
	for _, e := range c.Edits {
		r.AppliedEdits = append(r.AppliedEdits, e.Type)
		r.ClearedInput += e.ClearedInputTokens
		r.ClearedTools += e.ClearedToolUses
	}
	for _, t := range c.Transformations {
		r.InputTransformations = append(r.InputTransformations, t.Type+":"+t.Reason)
	}
	sp.EndChat(r)
}

// endSpans closes what is still open when the request is over.
func (x *exchange) endSpans() {
	if !x.s.cfg.Tracer.Enabled() {
		return
	}
	if x.out.status >= 500 || x.out.status == 499 {
		x.failCallSpan(0, "request ended")
	} else {
		x.spans.call.End()
	}
	x.spans.server.EndServer(x.out.status, x.who.label)
}
