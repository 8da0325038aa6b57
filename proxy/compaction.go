package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// compactionMeasure is a compaction to measure once the client has its
// reply (compact.measure_savings): the request that compacted, as
// count_tokens takes it without the compact edit, and what the compacted
// call read.
type compactionMeasure struct {
	body      []byte
	compacted int64
}

// measureOf is the measure to take of a call that compacted, when the
// tenant's policy asks for it (record keeps it). A threaded request is not
// measured: its body lacks the history the thread holds.
func (x *exchange) measureOf(status int, r tokens.Reply) (compactionMeasure, bool) {
	pol := x.who.pol
	if status != http.StatusOK || pol == nil || pol.ContextManagement.Compact == nil ||
		!pol.ContextManagement.Compact.MeasureSavings || x.req.info.Threaded || x.s.cfg.Recorder == nil {
		return compactionMeasure{}, false
	}
	compacted, ok := compactedInput(r.Iterations)
	if !ok {
		return compactionMeasure{}, false
	}
	body, err := countBody(joinParts(x.loop.parts))
	if err != nil {
		x.s.log.Warn("compaction not measured", zap.String("tenant", x.who.label), zap.Error(err))
		return compactionMeasure{}, false
	}
	return compactionMeasure{body: body, compacted: compacted}, true
}

// compactedInput is what the model read after the last compaction of a
// call: the input of the message step that follows it, cache included.
func compactedInput(its []tokens.Iteration) (int64, bool) {
	seen := false
	var in int64
	for _, it := range its {
		switch {
		case it.Type == tokens.IterationCompaction:
			seen, in = true, 0
		case seen:
			in = it.Usage.TotalInput()
		}
	}
	return in, seen && in > 0
}

// countFields are the members of a Messages request count_tokens takes.
var countFields = map[string]bool{"model": true, "messages": true, "system": true, "tools": true,
	"tool_choice": true, "thinking": true, "context_management": true, "mcp_servers": true}

// countBody is the count_tokens request for a Messages request, without
// its compact edit: what the request would read had it not compacted.
func countBody(body []byte) ([]byte, error) {
	out := []byte(`{}`)
	var err error
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		if !countFields[k.Str] {
			return true
		}
		raw := v.Raw
		if k.Str == "context_management" {
			raw = withoutCompact(v)
			if raw == "" {
				return true
			}
		}
		out, err = sjson.SetRawBytes(out, k.Str, []byte(raw))
		return err == nil
	})
	return out, err
}

// withoutCompact is a context_management value without compact edits; ""
// when no edit is left.
func withoutCompact(cm gjson.Result) string {
	edits := []byte(`[]`)
	cm.Get("edits").ForEach(func(_, e gjson.Result) bool {
		if e.Get("type").Str != policy.EditCompact {
			edits, _ = sjson.SetRawBytes(edits, "-1", []byte(e.Raw))
		}
		return true
	})
	if string(edits) == "[]" {
		return ""
	}
	return `{"edits":` + string(edits) + `}`
}

// measureCompactions asks count_tokens what each compacted call would have
// read without compaction and records it (with the savings the prices
// make of it) as that count_tokens call's ledger line. It runs once the
// client has its reply, inside the request's handler, so a graceful stop
// waits for it.
func (x *exchange) measureCompactions() {
	if len(x.acct.measures) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), 30*time.Second)
	defer cancel()
	for _, m := range x.acct.measures {
		if err := x.measureCompaction(ctx, m); err != nil {
			x.s.log.Warn("compaction not measured", zap.String("tenant", x.who.label), zap.Error(err))
		}
	}
}

// countTokensRoute is the route of a compaction measurement's call: shared,
// only read (newRequest takes its method, path and query).
var countTokensRoute = &http.Request{Method: http.MethodPost, URL: &url.URL{Path: pathCountTokens}}

// measureCompaction makes the count_tokens call of one measure, on the path
// every upstream call takes (callUpstream: the tenant's headers, the span,
// the reply scrubbed of the tenant's key), and records its ledger line.
func (x *exchange) measureCompaction(ctx context.Context, m compactionMeasure) error {
	resp, t0, err := x.callUpstream(ctx, countTokensRoute, [][]byte{m.body}, retryPolicy{})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := readReply(resp)
	x.acct.waited(t0)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		// Not its body: an upstream that echoes requests could quote a key in it.
		return &measureError{status: resp.StatusCode, requestID: resp.Header.Get("Request-Id")}
	}
	ct := tokens.ParseCountTokens(b)
	c := x.ledgerCall(resp)
	c.CountTokens, c.CompactedInputTokens = &ct, m.compacted
	c = x.s.cfg.Recorder.Record(ctx, c)
	x.endCallSpan(&c, replyMeta{})
	return nil
}

// measureError is a count_tokens call that did not answer 200: its status
// and request id, which the operator can look up upstream.
type measureError struct {
	status    int
	requestID string
}

func (e *measureError) Error() string {
	return fmt.Sprintf("count_tokens answered %d %s (request-id %q)", e.status, http.StatusText(e.status), e.requestID)
}
