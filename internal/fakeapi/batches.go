package fakeapi

import (
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
)

// customIDShape is the API's rule for a batch request's custom_id.
var customIDShape = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// serveBatchCreate answers POST /v1/messages/batches. The real API checks the
// batch's shape at once and each params when the batch runs (a bad one
// becomes an errored result); the fake checks every params at once with the
// /v1/messages rules and the batch's headers (betas included), so a test
// sees at once whether a proxy sent params the API would refuse. Nothing is
// ever processed: the batch stays in_progress.
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
	n, rerr := a.checkBatch(body, req.Header, &opts)
	if rerr != nil {
		a.answerError(w, req, r, rerr.status, rerr.err, reqID)
		return
	}
	id := a.newID("msgbatch_fake_")
	now := time.Now().UTC()
	out := []byte(`{"id":"` + id + `","type":"message_batch","processing_status":"in_progress",` +
		`"request_counts":{"processing":` + strconv.Itoa(n) + `,"succeeded":0,"errored":0,"canceled":0,"expired":0},` +
		`"ended_at":null,"created_at":"` + now.Format(time.RFC3339) + `","expires_at":"` + now.Add(24*time.Hour).Format(time.RFC3339) +
		`","cancel_initiated_at":null,"results_url":null,"archived_at":null}`)
	a.finish(r, 200, id, nil)
	a.setOutcome(r, OutcomeOK)
	a.writeBody(w, req, "", 200, out)
}

// checkBatch validates a batch body; it returns the number of requests.
func (a *API) checkBatch(body []byte, h http.Header, opts *Options) (int, *reqError) {
	if !gjson.ValidBytes(body) {
		return 0, badRequest("The request body is not valid JSON: %s", jsonErr(body))
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return 0, badRequest("The request body must be a JSON object")
	}
	reqs := root.Get("requests")
	if !reqs.Exists() {
		return 0, badRequest("requests: Field required")
	}
	if !reqs.IsArray() {
		return 0, badRequest("requests: Input should be a valid list")
	}
	seen := map[string]bool{}
	n := 0
	var rerr *reqError
	reqs.ForEach(func(_, r gjson.Result) bool {
		i := strconv.Itoa(n)
		n++
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
		return true
	})
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, badRequest("requests: List should have at least 1 item after validation, not 0")
	}
	return n, nil
}
