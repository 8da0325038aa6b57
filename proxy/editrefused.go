package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/policy"
	"github.com/ctxproxy/ctxproxy/tracing"
)

// An edit the tenant's policy added that the upstream refuses: whether the API takes
// clear_thinking_20251015 with thinking type between_tools is unverified (the December 2026 API
// reference's between_tools section), and ctxproxy writes it there where the model's
// capabilities list between_tools. A refusal of it (policy.RefusedEdit) is ctxproxy's doing,
// not the client's: the request goes once more without the edit (policy.WithoutEdit), and the
// refusal is learned (capabilities.Cache.Refuse) so the policy's rewrite no longer writes it for
// that tenant, model and thinking type, and later requests pay no refused call. The refused
// call costs nothing in the ledger (no usage; it is not recorded), is a failed call on its own
// span, and is named on the server span and in the request's log line (edits_refused).

// maxRefusalBody bounds what is read of a 400 reply to tell whether it refuses an added edit.
const maxRefusalBody = 64 << 10

// errorRefusesEdit reads a 400 reply and reports the edit of the policy's it refuses. The reply
// can be read again from its start, for relaying when it refuses none.
func (x *exchange) errorRefusesEdit(resp *http.Response) (string, bool) {
	if resp.StatusCode != http.StatusBadRequest || !x.req.info.ClearThinkingAdded {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil {
		return "", false
	}
	return policy.RefusedEdit(&x.req.info, resp.StatusCode, b)
}

// resendWithout sends body again without edit, which the upstream refused in refused (sent at
// t0): the same path (callUpstream) and retry policy as every call. It returns the new reply
// and the body it answers; when edit cannot be taken out of body, the refusal itself, as it
// came, and a nil body.
func (x *exchange) resendWithout(ctx context.Context, edit string, refused *http.Response, t0 time.Time, body [][]byte, p retryPolicy) (*http.Response, time.Time, [][]byte, error) {
	out, err := policy.WithoutEdit(joinParts(body), &x.req.info, x.req.header, edit)
	if err != nil {
		x.s.log.Error("an edit the policy added was refused and cannot be taken out; the refusal is relayed",
			zap.String("tenant", x.who.tenant), zap.String("model", x.req.info.Model), zap.Error(err))
		return refused, t0, nil, nil
	}
	io.Copy(io.Discard, refused.Body)
	refused.Body.Close()
	x.acct.waited(t0)
	x.acct.refusedEdits = append(x.acct.refusedEdits, edit)
	x.spans.server.Set(attribute.StringSlice(tracing.AttrEditsRefused, x.acct.refusedEdits))
	x.s.cfg.Models.Refuse(x.who.pol.Tenant, x.req.info.Model, x.req.info.ThinkingType, edit)
	resent := [][]byte{out}
	resp, t0, err := x.callUpstream(ctx, x.r, resent, p)
	return resp, t0, resent, err
}
