package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
	"github.com/ctxproxy/ctxproxy/limits"
	"github.com/ctxproxy/ctxproxy/tokens"
)

// The read side of Message Batches. Its routes pass through untouched
// (servePassthrough), and the proxy reads what it must of their replies:
//   - a batch (retrieve, cancel) or a page of them (list): results_url is
//     pointed at the proxy, since clients fetch the results where it says
//     (the TypeScript SDK does), and results must pass through the proxy to
//     be accounted. A batch that ended with no request succeeded owes
//     nothing: its hold is released at once.
//   - the results (JSON lines): every succeeded request is a ledger line on
//     the batch tier, with its batch_id and custom_id, and their cost settles
//     the batch's hold, whatever it held beyond that (canceled, expired and
//     errored requests, unused output) released. Only the first read of a
//     batch's results, on any replica, accounts them (limits.ClaimBatch):
//     reading them again costs nothing. That read is finished even when its
//     client leaves (resultsMeter.Close), so a batch is accounted whole.

// batchReadKey is the context key of a batch route's *batchRead.
type batchReadKey struct{}

// batchRead is a request to a batch route, as the passthrough serves it.
type batchRead struct {
	tenant string
	id     string // "" for the list
	action string // list, retrieve, cancel or results
	base   string // the proxy as the client reached it: scheme://host
	cancel context.CancelFunc
}

// Batch route actions.
const (
	batchList     = "list"
	batchRetrieve = "retrieve"
	batchCancel   = "cancel"
	batchResults  = "results"
)

// batchReadFor is the batchRead of r (its path canonical, see classify), nil
// when r is not a batch read the proxy accounts.
func (s *Server) batchReadFor(r *http.Request, tenant string) *batchRead {
	if s.cfg.Limits == nil {
		return nil
	}
	rest, ok := strings.CutPrefix(r.URL.Path, pathBatches)
	if !ok {
		return nil
	}
	id, sub, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	br := &batchRead{tenant: tenant, id: id, cancel: func() {}}
	switch {
	case rest == "" && r.Method == http.MethodGet:
		br.action = batchList
	case !batchID(id):
		return nil
	case sub == "" && r.Method == http.MethodGet:
		br.action = batchRetrieve
	case sub == "cancel" && r.Method == http.MethodPost:
		br.action = batchCancel
	case sub == "results" && r.Method == http.MethodGet:
		br.action = batchResults
	default:
		return nil
	}
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	br.base = scheme + "://" + r.Host
	return br
}

// prepare readies the upstream request of a batch read: its reply must come
// readable, and a results read outlives its client (see resultsMeter.Close).
func (br *batchRead) prepare(pr *http.Request) *http.Request {
	pr.Header.Set("Accept-Encoding", "identity")
	if br.action != batchResults {
		return pr
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(pr.Context()))
	br.cancel = cancel
	return pr.WithContext(ctx)
}

func batchReadOf(ctx context.Context) *batchRead {
	br, _ := ctx.Value(batchReadKey{}).(*batchRead)
	return br
}

// observeBatch reads what the proxy must of a batch read's reply (see above).
func (s *Server) observeBatch(resp *http.Response) {
	br := batchReadOf(resp.Request.Context())
	if br == nil || resp.StatusCode != http.StatusOK {
		return
	}
	ctx := resp.Request.Context()
	if br.action == batchResults {
		if c := s.cfg.Limits.ClaimBatch(ctx, br.id, br.tenant); c != nil {
			resp.Body = &resultsMeter{s: s, claim: c, body: resp.Body, cancel: br.cancel, requestID: resp.Header.Get("Request-Id")}
		}
		return
	}
	orig := resp.Body
	b, err := io.ReadAll(io.LimitReader(orig, maxBatchObjects))
	if err != nil || len(b) == maxBatchObjects {
		// Broken or larger than any page of batches: relayed as it comes.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), orig), orig}
		return
	}
	orig.Close()
	if br.action == batchList {
		b = pointResults(b, "data.#.results_url", br.base)
	} else {
		b = pointResults(b, "results_url", br.base)
		s.endedBatch(ctx, br, b)
	}
	// Its length is the server's to set: a declared one would leave no room for trailers,
	// which the upstream's body, read to its end, has filled in resp.Trailer.
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

// maxBatchObjects bounds a batch or a page of batches the proxy reads whole
// (a page holds at most 1,000 batches of well under 1 KiB).
const maxBatchObjects = 8 << 20

// pointResults points the results_url values at path in b at the proxy
// (base): the URL's /v1/messages/batches/… tail under base. Other bytes stay.
func pointResults(b []byte, path, base string) []byte {
	r := gjson.GetBytes(b, path)
	vals, at := []gjson.Result{r}, []int{r.Index}
	if r.Indexes != nil {
		vals, at = r.Array(), r.Indexes
	}
	var out []byte
	last := 0
	for i, v := range vals {
		if i >= len(at) || v.Type != gjson.String {
			continue
		}
		tail := strings.Index(v.Str, pathBatches+"/")
		start, end := at[i], at[i]+len(v.Raw)
		if tail < 0 || start < last || end > len(b) || string(b[start:end]) != v.Raw {
			continue
		}
		out = append(out, b[last:start]...)
		out = jsonstr.Append(out, base+v.Str[tail:])
		last = end
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// endedBatch releases the hold of a batch b says ended with no request
// succeeded: its results will have nothing to pay.
func (s *Server) endedBatch(ctx context.Context, br *batchRead, b []byte) {
	if gjson.GetBytes(b, "processing_status").Str != "ended" {
		return
	}
	if n := gjson.GetBytes(b, "request_counts.succeeded"); n.Type != gjson.Number || n.Int() != 0 {
		return
	}
	if c := s.cfg.Limits.ClaimBatch(ctx, br.id, br.tenant); c != nil {
		c.Settle(ctx, 0)
		s.log.Info("batch ended with no request succeeded; its hold is released", zap.String("tenant", br.tenant), zap.String("batch", br.id))
	}
}

// resultsMeter accounts a batch's results as they pass to the client: each
// succeeded request a ledger line, their cost settled on the batch when the
// results end.
type resultsMeter struct {
	s         *Server
	claim     *limits.BatchClaim
	body      io.ReadCloser
	cancel    context.CancelFunc // ends the upstream read
	requestID string

	line    []byte // the line read so far
	skip    bool   // the line is past maxResultLine: not accounted
	results int    // succeeded results accounted
	cost    tokens.Money
	done    bool
}

// maxResultLine bounds one result line the proxy holds to read: one message,
// far over any model's longest reply.
const maxResultLine = 32 << 20

// drainWait bounds how long the proxy goes on reading results its client left.
const drainWait = 5 * time.Minute

func (m *resultsMeter) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	m.feed(p[:n])
	if err != nil && !m.done {
		m.end(err == io.EOF)
	}
	return n, err
}

// Close reads what the client left unread, to account the batch whole, then
// closes the body.
func (m *resultsMeter) Close() error {
	if !m.done {
		t := time.AfterFunc(drainWait, m.cancel)
		io.Copy(io.Discard, struct{ io.Reader }{m}) //nolint:errcheck // the end is what Read saw
		t.Stop()
		if !m.done {
			m.end(false)
		}
	}
	m.cancel()
	return m.body.Close()
}

// feed splits what was read into lines and accounts each whole one.
func (m *resultsMeter) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if !m.skip && len(m.line)+len(part) <= maxResultLine {
			m.line = append(m.line, part...)
		} else {
			m.skip, m.line = true, m.line[:0]
		}
		if i < 0 {
			return
		}
		m.account()
		b = b[i+1:]
	}
}

// account records the line read, if it is a succeeded result, and starts the next.
func (m *resultsMeter) account() {
	line := m.line
	skipped := m.skip
	m.line, m.skip = m.line[:0], false
	if skipped {
		m.s.log.Warn("batch result not accounted: its line is too long", zap.String("tenant", m.claim.Tenant), zap.String("batch", m.claim.ID))
		return
	}
	if len(bytes.TrimSpace(line)) == 0 || gjson.GetBytes(line, "result.type").Str != "succeeded" {
		return
	}
	msg := gjson.Get(bstr(line), "result.message")
	if !msg.IsObject() || msg.Index <= 0 || msg.Index+len(msg.Raw) > len(line) {
		return
	}
	r := tokens.ParseReply(line[msg.Index : msg.Index+len(msg.Raw)])
	c := ledgerLine(m.claim.Tenant, m.claim.KeyID, m.claim.User, r.Model, m.requestID, http.StatusOK)
	c.MessageID = r.ID
	c.Usage, c.Iterations, c.Edits = r.Billed(), r.Iterations, r.Edits
	c.ServiceTier = tokens.TierBatch // a batch's result, whatever its usage says
	c.BatchID, c.CustomID = m.claim.ID, gjson.GetBytes(line, "custom_id").Str
	c = m.s.ledger(context.Background(), c)
	m.cost = m.cost.Plus(m.s.charge(&c))
	m.results++
}

// end settles the batch with what its results cost; complete says the
// results were read to their end.
func (m *resultsMeter) end(complete bool) {
	if len(m.line) > 0 || m.skip {
		m.account() // a last line without its newline
	}
	m.done = true
	m.claim.Settle(context.Background(), m.cost)
	fields := []zap.Field{zap.String("tenant", m.claim.Tenant), zap.String("batch", m.claim.ID),
		zap.Int("results", m.results), zap.String("cost_usd", m.cost.String())}
	if !complete {
		m.s.log.Error("batch results read in part: the rest is not accounted", fields...)
		return
	}
	m.s.log.Info("batch results accounted", fields...)
}

// openBatch records a batch the upstream created: its requests' hold becomes
// the batch's (limits.Enforcer.OpenBatch) until its results pass through.
func (x *exchange) openBatch(resp *http.Response, body []byte) {
	e := x.s.cfg.Limits
	if x.ep != epBatchCreate || e == nil || resp.StatusCode != http.StatusOK {
		return
	}
	id := gjson.GetBytes(body, "id")
	if id.Type != gjson.String || !batchID(id.Str) {
		return
	}
	e.OpenBatch(x.r.Context(), x.ticket, limits.Batch{ID: strings.Clone(id.Str), Tenant: x.who.label,
		KeyID: x.who.keyID, User: x.who.user})
}
