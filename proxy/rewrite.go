package proxy

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/ctxproxy/ctxproxy/cachetrack"
	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/internal/upstreamreq"
	"github.com/ctxproxy/ctxproxy/policy"
)

// openConversation matches a Messages request to its conversation. top is what the rewrite's
// validating pass found of the body's members (RewriteInfo.Top); nil when the body is read
// before the rewrite, which builds a short body's result in its own array (rewritesInPlace): then
// cachetrack finds them in a pass of its own. Only tenants whose policy clears (or asks
// diagnostics) are tracked: for the others a call's cache effect is none or unknown whatever
// came before.
func (x *exchange) openConversation(body []byte, top *policy.TopValues) conversation {
	pol, t := x.who.pol, x.s.cfg.CacheTracker
	if t == nil || x.ep != epMessages || !(pol.WritesClearingEdits() || pol.CacheDiagnostics() || pol.HasShadow()) {
		return conversation{}
	}
	var r cachetrack.Request
	if top == nil {
		r = cachetrack.ReadRequest(pol.Tenant, body)
	} else {
		r = cachetrack.Read(pol.Tenant, cachetrack.Members{System: top.System.Of(body), Tools: top.Tools.Of(body),
			Messages: top.Messages.Of(body), Thread: top.Thread.Of(body), Diagnostics: top.Diagnostics.Of(body)})
	}
	v := conversation{on: true, scope: pol.Tenant, key: r.Turn, system: r.System, tools: r.Tools}
	v.prev, v.known = t.Lookup(r.Turn)
	v.asked = pol.CacheDiagnostics() && !r.HasDiagnostics
	return v
}

// rewriteFor applies pol to a Messages or count_tokens body;
// the result is the upstream body in pieces.
func rewriteFor(pol *policy.Policy, body []byte, h http.Header) ([][]byte, policy.RewriteInfo, error) {
	if rewritesInPlace(body) {
		// Built whole, in the room newBodyBuf left after the body: a small
		// body goes upstream as one *bytes.Reader (requestBody), so pieces
		// would only be joined. The client's bytes are not read again.
		out, info, err := pol.RewriteInPlace(body, h)
		if err != nil {
			return nil, info, err
		}
		return [][]byte{out}, info, nil
	}
	return pol.RewriteParts(body, h)
}

// rewritesInPlace says whether rewriteFor builds body's rewrite in body's own array, after
// which body is no longer what the client sent.
func rewritesInPlace(body []byte) bool { return len(body) < minPooledBody }

// request is the upstream request the tenant's policy made of the client's.
type request struct {
	header http.Header        // the upstream request's headers: the tenant's credential, betas merged
	parts  [][]byte           // its body, in pieces that alias the client's
	info   policy.RewriteInfo // what the rewrite read and did (model, stream, edits; zero for a batch)
	items  []policy.BatchItem // a batch's requests, for the limits
	// msgEnd is the closing ']' of the messages array in parts, where a memory round adds its
	// turns (spliceRound); not found for a body rewritten in place, a thread or a body with
	// its own diagnostics.
	msgEnd partPos
	// msgs is the messages array as it goes upstream (the rewrite never changes it), in the
	// client's buffer, when msgsRead: the rewrite's pass found it (nil: none). Not for a body
	// rewritten in place.
	msgs     []byte
	msgsRead bool
}

// rewrite applies the tenant's policy to the client's body: a Messages or
// count_tokens request (rewriteFor), or a batch, each of whose
// requests[].params gets the policy (policy.RewriteBatch: no memory tool in
// proxy mode, since no loop can run inside a batch; the reply is relayed as
// it is, and the batch recorded, openBatch, so its results are accounted
// when they pass through, batchreads.go). A nil policy (no default.yaml)
// still validates the body and changes nothing. It answers a refused body
// itself. The conversation (openConversation, below; cacheconv.go) is read from the rewrite's own
// pass over the body (info.Top), or, for a body rewritten in place, before
// the rewrite (a short body, in a pass of its own).
func (x *exchange) rewrite(body []byte) (request, conversation, bool) {
	q := request{header: x.upstreamHeader()}
	if x.ep == epBatchCreate {
		out, info, err := x.who.pol.RewriteBatch(body, q.header)
		q.items = info.Items
		return q, conversation{}, x.accept(&q, [][]byte{out}, policy.RewriteInfo{}, err)
	}
	var conv conversation
	inPlace := rewritesInPlace(body)
	if inPlace {
		conv = x.openConversation(body, nil)
	}
	parts, info, err := rewriteFor(x.who.pol, body, q.header)
	if !x.accept(&q, parts, info, err) {
		return q, conv, false
	}
	if !inPlace {
		conv = x.openConversation(body, &info.Top)
	}
	conv.askDiagnostics(&q, inPlace)
	if !inPlace {
		q.msgs, q.msgsRead = info.Top.Messages.Of(body), true
	}
	if m := info.Top.Messages; !inPlace && !info.Threaded && m.End > m.Start && info.Top.Diagnostics.End == 0 {
		q.msgEnd = posIn(q.parts, body, m.End-1)
	}
	return q, conv, true
}

// upstreamHeader is the client's headers as they go upstream, with the
// tenant's own key in place of the client's credential when it has one. It
// is built once per client request and shared by every upstream call of it,
// which only read it.
func (x *exchange) upstreamHeader() http.Header {
	h := upstreamreq.Forwarded(x.r.Header)
	if x.who.upstreamKey != "" {
		upstreamreq.SetCredential(h, upstreamreq.Key(x.who.upstreamKey))
	}
	return h
}

// accept takes the rewrite's result into q, or answers the client its error.
// The rewrite read model and stream in its validating pass (info): a gjson
// lookup of an absent "stream" would walk the whole body once more.
func (x *exchange) accept(q *request, parts [][]byte, info policy.RewriteInfo, err error) bool {
	if err != nil {
		var re *policy.RequestError
		if errors.As(err, &re) {
			x.refuse(re)
			return false
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", err.Error())
		return false
	}
	q.parts, q.info = parts, info
	return true
}

// askDiagnostics adds diagnostics.previous_message_id (the conversation's previous reply, null
// when unknown) to the upstream request q, before its closing brace. inPlace: q's body is one
// piece in the proxy's own buffer (a short body rewritten in place), extended in its array
// when it has the room (no copy of the body to join it with the field).
func (v *conversation) askDiagnostics(q *request, inPlace bool) {
	if !v.asked {
		return
	}
	if inPlace && len(q.parts) == 1 {
		if out, ok := v.diagnosticsInPlace(q.parts[0]); ok {
			q.parts[0] = out
			return
		}
	}
	q.parts = v.withDiagnostics(q.parts)
}

// diagValueWidth is the bytes previous_message_id's value takes, padded with spaces: a body
// forwarded while it arrives is sent with the length the tenant's last one had (lead.go), so
// the field is as long whether it names a reply or is null.
const diagValueWidth = 64

// appendDiagnostics appends the diagnostics member, with its leading comma.
func (v *conversation) appendDiagnostics(field []byte) []byte {
	field = append(field, `,"diagnostics":{"previous_message_id":`...)
	at := len(field)
	if v.known && v.prev.MessageID != "" {
		field = jsonstr.Append(field, v.prev.MessageID)
	} else {
		field = append(field, "null"...)
	}
	for len(field)-at < diagValueWidth {
		field = append(field, ' ')
	}
	return append(field, '}')
}

// withDiagnostics is parts (a body in pieces that may alias the client's) with the diagnostics
// field before the last closing brace; parts itself when there is none to ask or no brace.
func (v *conversation) withDiagnostics(parts [][]byte) [][]byte {
	if !v.asked || len(parts) == 0 {
		return parts
	}
	last := parts[len(parts)-1]
	end := bytes.LastIndexByte(last, '}')
	if end < 0 {
		return parts
	}
	field := v.appendDiagnostics(make([]byte, 0, 48+diagValueWidth+len(last)-end))
	field = append(field, last[end:]...)
	out := make([][]byte, 0, len(parts)+1)
	out = append(out, parts[:len(parts)-1]...)
	return append(out, last[:end], field)
}

// diagnosticsInPlace is body with the diagnostics field before its last closing brace, built
// in body's array; false when it has no room or no brace.
func (v *conversation) diagnosticsInPlace(body []byte) ([]byte, bool) {
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		return body, false
	}
	var buf [48 + diagValueWidth + 8]byte
	field := v.appendDiagnostics(buf[:0])
	n := len(body) + len(field)
	if n > cap(body) {
		return body, false
	}
	out := body[:n]
	copy(out[end+len(field):], body[end:])
	copy(out[end:], field)
	return out, true
}
