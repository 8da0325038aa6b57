package fakeapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/ctxproxy/ctxproxy/internal/jsonstr"
)

// customIDShape is the API's rule for a batch request's custom_id.
var customIDShape = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Batch processing statuses and result types (MessageBatch.processing_status,
// MessageBatchIndividualResponse.result.type).
const (
	BatchInProgress = "in_progress"
	BatchCanceling  = "canceling"
	BatchEnded      = "ended"

	ResultSucceeded = "succeeded"
	ResultErrored   = "errored"
	ResultCanceled  = "canceled"
	ResultExpired   = "expired"
)

// batch is one Message Batch the fake holds. Its requests run only when a
// test says so (ProcessBatch, ExpireBatch), so a test decides what each
// result is and when the batch ends.
type batch struct {
	id                         string
	created, expires           time.Time
	cancelInitiated, ended     time.Time // zero: null
	header                     http.Header
	items                      []batchItem
	processed                  int // items[:processed] have results
	succeeded, errored         int
	canceled, expired          int
	resultsHost, resultsScheme string
}

type batchItem struct {
	customID string
	params   []byte
	result   []byte // the results line, once it has one
}

func (b *batch) status() string {
	switch {
	case !b.ended.IsZero():
		return BatchEnded
	case !b.cancelInitiated.IsZero():
		return BatchCanceling
	}
	return BatchInProgress
}

// batchStore holds the batches, newest last.
type batchStore struct {
	mu   sync.Mutex
	list []*batch
	byID map[string]*batch
}

func (s *batchStore) add(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*batch{}
	}
	s.list = append(s.list, b)
	s.byID[b.id] = b
}

// serveBatchCreate answers POST /v1/messages/batches. The real API checks the
// batch's shape at once and each params when the batch runs (a bad one
// becomes an errored result); the fake checks every params at once with the
// /v1/messages rules and the batch's headers (betas included), so a test
// sees at once whether a proxy sent params the API would refuse. The batch
// then stays in_progress until ProcessBatch or ExpireBatch.
func (a *API) serveBatchCreate(w http.ResponseWriter, req *http.Request, reqID string) {
	a.mu.Lock()
	opts := a.opts
	a.mu.Unlock()
	body, st, e := a.readBody(req)
	if unread(w, st, e, reqID) {
		return
	}
	r := newRequest(a, req, body)
	a.record(r)
	if e != nil {
		a.answerError(w, req, r, st, e, reqID)
		return
	}
	items, rerr := a.checkBatch(body, req.Header, &opts)
	if rerr != nil {
		a.answerError(w, req, r, rerr.status, rerr.err, reqID)
		return
	}
	now := time.Now().UTC()
	b := &batch{id: a.newID("msgbatch_fake_"), created: now, expires: now.Add(24 * time.Hour), header: req.Header.Clone(),
		items: items, resultsHost: req.Host, resultsScheme: "http"}
	if req.TLS != nil {
		b.resultsScheme = "https"
	}
	a.batches.add(b)
	a.batches.mu.Lock()
	out := b.json()
	a.batches.mu.Unlock()
	a.finish(r, 200, b.id, nil)
	a.setOutcome(r, OutcomeOK)
	a.writeBody(w, req, "", 200, out)
}

// checkBatch validates a batch body; it returns its requests.
func (a *API) checkBatch(body []byte, h http.Header, opts *Options) ([]batchItem, *reqError) {
	if !gjson.ValidBytes(body) {
		return nil, badRequest("The request body is not valid JSON: %s", jsonErr(body))
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, badRequest("The request body must be a JSON object")
	}
	reqs := root.Get("requests")
	if !reqs.Exists() {
		return nil, badRequest("requests: Field required")
	}
	if !reqs.IsArray() {
		return nil, badRequest("requests: Input should be a valid list")
	}
	seen := map[string]bool{}
	var items []batchItem
	var rerr *reqError
	reqs.ForEach(func(_, r gjson.Result) bool {
		i := strconv.Itoa(len(items))
		id := r.Get("custom_id")
		if id.Type != gjson.String || !customIDShape.MatchString(id.Str) {
			rerr = badRequest("requests.%s.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
			return false
		}
		if seen[id.Str] {
			rerr = badRequest("requests.%s.custom_id: %q is used more than once in this batch", i, id.Str)
			return false
		}
		seen[id.Str] = true
		params := r.Get("params")
		if !params.IsObject() {
			rerr = badRequest("requests.%s.params: Input should be a valid dictionary", i)
			return false
		}
		p, perr := a.parseRequest([]byte(params.Raw), h, false, opts)
		a.releaseThread(p, false)
		if perr != nil {
			e := *perr.err
			e.Message = "requests." + i + ".params: " + e.Message
			rerr = &reqError{perr.status, &e}
			return false
		}
		items = append(items, batchItem{customID: id.Str, params: []byte(params.Raw)})
		return true
	})
	if rerr != nil {
		return nil, rerr
	}
	if len(items) == 0 {
		return nil, badRequest("requests: List should have at least 1 item after validation, not 0")
	}
	return items, nil
}

// json is the MessageBatch object; the store's lock must be held.
func (b *batch) json() []byte {
	ts := func(out []byte, t time.Time) []byte {
		if t.IsZero() {
			return append(out, "null"...)
		}
		return jsonstr.Append(out, t.Format(time.RFC3339Nano))
	}
	processing := len(b.items) - b.processed
	out := []byte(`{"id":`)
	out = jsonstr.Append(out, b.id)
	out = append(out, `,"type":"message_batch","processing_status":"`+b.status()+`","request_counts":{"processing":`...)
	out = strconv.AppendInt(out, int64(processing), 10)
	for _, c := range []struct {
		name string
		n    int
	}{{"succeeded", b.succeeded}, {"errored", b.errored}, {"canceled", b.canceled}, {"expired", b.expired}} {
		out = append(out, `,"`+c.name+`":`...)
		out = strconv.AppendInt(out, int64(c.n), 10)
	}
	out = append(out, `},"ended_at":`...)
	out = ts(out, b.ended)
	out = append(out, `,"created_at":`...)
	out = ts(out, b.created)
	out = append(out, `,"expires_at":`...)
	out = ts(out, b.expires)
	out = append(out, `,"cancel_initiated_at":`...)
	out = ts(out, b.cancelInitiated)
	out = append(out, `,"results_url":`...)
	if b.ended.IsZero() {
		out = append(out, "null"...)
	} else {
		out = jsonstr.Append(out, b.resultsScheme+"://"+b.resultsHost+"/v1/messages/batches/"+b.id+"/results")
	}
	return append(out, `,"archived_at":null}`...)
}

// serveBatch answers the batch routes other than create: list (GET
// /v1/messages/batches), retrieve (GET …/{id}), delete (DELETE …/{id}, once
// ended), cancel (POST …/{id}/cancel, before it ends) and results (GET
// …/{id}/results, JSON lines once it ended). An unknown id is 404
// not_found_error. ok is false for a path that is none of these.
func (a *API) serveBatch(w http.ResponseWriter, req *http.Request, reqID string) (ok bool) {
	rest, found := strings.CutPrefix(req.URL.Path, "/v1/messages/batches")
	id, action, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	route := req.Method + " " + action
	switch {
	case !found || (rest != "" && !strings.HasPrefix(rest, "/")):
		return false
	case rest == "" && req.Method == http.MethodGet:
		route = "list"
	case id == "":
		return false
	}
	switch route {
	case "list", "GET ", "DELETE ", "POST cancel", "GET results":
	default:
		return false
	}
	a.mu.Lock()
	opts := a.opts
	a.mu.Unlock()
	r := newRequest(a, req, nil)
	r.ID = reqID
	a.record(r)
	fail := func(st int, e *APIError) { a.answerError(w, req, r, st, e, reqID) }
	if e := a.checkHeaders(req.Header, parseBetas(req.Header), &opts); e != nil {
		fail(e.status, e.err)
		return true
	}
	s := &a.batches
	s.mu.Lock()
	if route == "list" {
		out := a.batchList()
		s.mu.Unlock()
		a.answered(w, req, r, out)
		return true
	}
	b := s.byID[id]
	if b == nil {
		s.mu.Unlock()
		fail(404, &APIError{Type: "not_found_error", Message: "Message Batch " + id + " not found"})
		return true
	}
	var out []byte
	var e *APIError
	switch route {
	case "GET ":
		out = b.json()
	case "DELETE ":
		if b.status() != BatchEnded {
			e = &APIError{Type: "invalid_request_error", Message: "Message Batch " + id + " is still being processed; cancel it before deleting it"}
			break
		}
		delete(s.byID, id)
		for i, x := range s.list {
			if x == b {
				s.list = append(s.list[:i], s.list[i+1:]...)
				break
			}
		}
		out = []byte(`{"id":` + string(jsonstr.Append(nil, id)) + `,"type":"message_batch_deleted"}`)
	case "POST cancel":
		if b.status() == BatchEnded {
			e = &APIError{Type: "invalid_request_error", Message: "Message Batch " + id + " has ended and cannot be canceled"}
			break
		}
		if b.cancelInitiated.IsZero() {
			b.cancelInitiated = time.Now().UTC()
		}
		out = b.json()
	case "GET results":
		if b.status() != BatchEnded {
			e = &APIError{Type: "invalid_request_error", Message: "Message Batch " + id + " has not ended; its results are not available yet"}
			break
		}
		for _, it := range b.items {
			out = append(append(out, it.result...), '\n')
		}
	}
	s.mu.Unlock()
	if e != nil {
		fail(400, e)
		return true
	}
	if route == "GET results" {
		w.Header().Set("Content-Type", "application/binary")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		a.finish(r, 200, "", nil)
		a.setOutcome(r, OutcomeOK)
		w.WriteHeader(200)
		_, _ = w.Write(out)
		return true
	}
	a.answered(w, req, r, out)
	return true
}

func (a *API) answered(w http.ResponseWriter, req *http.Request, r *Request, out []byte) {
	a.finish(r, 200, "", nil)
	a.setOutcome(r, OutcomeOK)
	a.writeBody(w, req, "", 200, out)
}

// batchList is the first page of every batch, newest first; the store's lock must be held.
func (a *API) batchList() []byte {
	out := []byte(`{"data":[`)
	l := a.batches.list
	for i := len(l) - 1; i >= 0; i-- {
		if i < len(l)-1 {
			out = append(out, ',')
		}
		out = append(out, l[i].json()...)
	}
	out = append(out, `],"has_more":false,"first_id":`...)
	if len(l) == 0 {
		return append(out, `null,"last_id":null}`...)
	}
	out = jsonstr.Append(out, l[len(l)-1].id)
	out = append(out, `,"last_id":`...)
	out = jsonstr.Append(out, l[0].id)
	return append(out, '}')
}

// ErrNoBatch is the error of ProcessBatch and ExpireBatch for an id the fake does not hold.
var ErrNoBatch = errors.New("fakeapi: no such batch")

// ProcessBatch runs up to n (n <= 0: all) of the batch's requests still
// processing, in order, each answered like a /v1/messages request without a
// stream (the Enqueue FIFO, else the responder): a scripted error makes it
// errored, anything else succeeded, with usage.service_tier "batch". The
// batch ends when no request is left. A batch being canceled instead ends at
// once, its unprocessed requests canceled.
func (a *API) ProcessBatch(id string, n int) error {
	return a.endBatch(id, n, false)
}

// ExpireBatch ends the batch as the API does 24 hours after its creation:
// every request still processing expires.
func (a *API) ExpireBatch(id string) error { return a.endBatch(id, 0, true) }

func (a *API) endBatch(id string, n int, expire bool) error {
	s := &a.batches
	s.mu.Lock()
	b := s.byID[id]
	if b == nil {
		s.mu.Unlock()
		return ErrNoBatch
	}
	if b.status() == BatchEnded {
		s.mu.Unlock()
		return nil
	}
	canceling := b.status() == BatchCanceling
	start, end := b.processed, len(b.items)
	if !canceling && !expire && n > 0 {
		end = min(end, start+n)
	}
	todo := append([]batchItem(nil), b.items[start:end]...)
	h := b.header
	s.mu.Unlock()
	// Requests run outside the lock: a responder may block or call the fake.
	results := make([][]byte, len(todo))
	kinds := make([]string, len(todo))
	for i, it := range todo {
		switch {
		case canceling:
			kinds[i] = ResultCanceled
		case expire:
			kinds[i] = ResultExpired
		default:
			kinds[i], results[i] = a.runBatched(it, h)
			continue
		}
		results[i] = []byte(`{"custom_id":` + string(jsonstr.Append(nil, it.customID)) + `,"result":{"type":"` + kinds[i] + `"}}`)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range todo {
		b.items[start+i].result = results[i]
		switch kinds[i] {
		case ResultSucceeded:
			b.succeeded++
		case ResultErrored:
			b.errored++
		case ResultCanceled:
			b.canceled++
		case ResultExpired:
			b.expired++
		}
	}
	b.processed = end
	if b.processed == len(b.items) {
		b.ended = time.Now().UTC()
	}
	return nil
}

// runBatched answers one batched request and returns its result type and results line.
func (a *API) runBatched(it batchItem, h http.Header) (string, []byte) {
	line := []byte(`{"custom_id":` + string(jsonstr.Append(nil, it.customID)) + `,"result":`)
	opts := a.CurrentOptions()
	p, perr := a.parseRequest(it.params, h, false, &opts)
	a.releaseThread(p, false)
	if perr != nil {
		return ResultErrored, append(append(append(line, `{"type":"errored","error":`...), errorBody(perr.err, "")...), "}}"...)
	}
	r := &Request{Time: time.Now(), Method: http.MethodPost, Path: "/v1/messages", Model: p.model, Betas: p.betas,
		Messages: p.messages, Tools: p.tools, AssistantTurns: p.assistant}
	rep := a.next(r)
	if _, e, isErr := rep.errorParts(); isErr {
		return ResultErrored, append(append(append(line, `{"type":"errored","error":`...), errorBody(e, "")...), "}}"...)
	}
	m := a.buildMessage(p, &rep, nil) // batches read no prompt cache here: their hits are best effort
	msg := m.body()
	if tiered, err := sjson.SetBytes(msg, "usage.service_tier", "batch"); err == nil {
		msg = tiered
	}
	line = append(line, `{"type":"succeeded","message":`...)
	line = append(line, msg...)
	return ResultSucceeded, append(line, "}}"...)
}

// controlBatch serves POST /_fake/batches/process {"id":…,"requests":N} (ProcessBatch; N 0 or
// absent: all) and POST /_fake/batches/expire {"id":…} (ExpireBatch), answering the batch.
func (a *API) controlBatch(w http.ResponseWriter, req *http.Request) {
	var in struct {
		ID       string `json:"id"`
		Requests int    `json:"requests"`
	}
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&in); err != nil {
		writeError(w, 400, &APIError{Type: "invalid_request_error", Message: "batches: " + err.Error()}, "")
		return
	}
	var err error
	if strings.HasSuffix(req.URL.Path, "/expire") {
		err = a.ExpireBatch(in.ID)
	} else {
		err = a.ProcessBatch(in.ID, in.Requests)
	}
	if err != nil {
		writeError(w, 404, &APIError{Type: "not_found_error", Message: err.Error() + ": " + in.ID}, "")
		return
	}
	a.batches.mu.Lock()
	var out []byte
	if b := a.batches.byID[in.ID]; b != nil {
		out = b.json()
	}
	a.batches.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	_, _ = w.Write(out)
}
