package policy

import (
	"fmt"
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// BatchInfo says what RewriteBatch found and did.
type BatchInfo struct {
	Requests  int // entries in requests
	Rewritten int // entries whose params the policy changed
	BetaAdded bool
	// Items are the batched requests as they go upstream, in order: what admission against a
	// tenant's limits counts.
	Items []BatchItem
}

// BatchItem is what admission reads of one batched request. Its strings are copies.
type BatchItem struct {
	Model          string // params.model, when a string
	MaxTokens      int64  // params.max_tokens, when a number
	MetadataUserID string // params.metadata.user_id, when a string
	Bytes          int    // the size of its params as sent upstream
}

// RewriteBatch applies p to a Message Batches create body
// ({"requests":[{"custom_id":…,"params":{…}},…]}): every requests[].params gets the same rules
// as a /v1/messages body, except that the memory tool is added only in memory inject mode. A
// batch has no memory loop, so in proxy mode the model could call a tool nobody runs; "memory"
// still stays out of clearing. The context-management beta is merged into h once when any params
// needs it (a batch's betas are its header's).
//
// Only the params values change; every other byte stays. The body is scanned once and each params
// once more; nothing is unmarshalled. A params the rules refuse is a *RequestError whose message
// names its index and custom_id. A nil p checks the body and changes nothing.
func (p *Policy) RewriteBatch(body []byte, h http.Header) ([]byte, BatchInfo, error) {
	var info BatchInfo
	reqs, err := batchRequests(body)
	if err != nil {
		return nil, info, err
	}
	var ops []splice
	needsBeta, compact := false, false
	reqs.ForEach(func(_, r gjson.Result) bool {
		i := info.Requests
		info.Requests++
		var params gjson.Result
		params, err = batchParams(r, i)
		if err != nil {
			return false
		}
		at := func(e error) error { return batchError(e, i, r.Get("custom_id").Str) }
		raw := body[params.Index : params.Index+len(params.Raw)]
		pops, pinfo, perr := p.rewrite(raw, nil, true, span{})
		if perr != nil {
			err = at(perr)
			return false
		}
		needsBeta = needsBeta || pinfo.NeedsBeta
		compact = compact || pinfo.Compact
		item := BatchItem{Model: strings.Clone(pinfo.Model), MaxTokens: pinfo.MaxTokens,
			MetadataUserID: strings.Clone(pinfo.MetadataUserID), Bytes: len(raw)}
		if len(pops) > 0 {
			out := applySplices(raw, pops)
			ops = append(ops, splice{start: params.Index, end: params.Index + len(params.Raw),
				data: unsafe.String(unsafe.SliceData(out), len(out))})
			info.Rewritten++
			item.Bytes = len(out)
		}
		info.Items = append(info.Items, item)
		return true
	})
	if err != nil {
		return nil, info, err
	}
	if info.Requests == 0 {
		return nil, info, badRequest("requests: the batch must have at least one request")
	}
	if p != nil && h != nil {
		var bs Betas
		if needsBeta {
			bs |= BetasContextManagement
		}
		if compact {
			bs |= BetasCompact
		}
		info.BetaAdded = bs.Merge(h)
	}
	if len(ops) == 0 {
		return body, info, nil
	}
	return applySplices(body, ops), info, nil
}

// batchRequests validates the batch body and returns its requests array, with absolute offsets.
func batchRequests(body []byte) (gjson.Result, error) {
	s := unsafe.String(unsafe.SliceData(body), len(body))
	var mbuf [4]topMember
	members := mbuf[:0]
	members, start, _, serr := scanBody(body, members, scanAll, span{})
	if serr != nil {
		if serr.off == 0 && len(trimRightSpace(s)) == 0 {
			return gjson.Result{}, badRequest("request body is empty; expected a JSON object")
		}
		return gjson.Result{}, serr.requestError(body)
	}
	if s[start] != '{' {
		return gjson.Result{}, badRequest("request body must be a JSON object, got %s", jsonKind(s[start]))
	}
	var reqs gjson.Result
	seen := false
	for _, tm := range members {
		k := s[tm.keyStart+1 : tm.keyEnd-1]
		if tm.keyEsc {
			k = gjson.Parse(s[tm.keyStart:tm.keyEnd]).Str
		}
		if k != "requests" {
			continue
		}
		if seen {
			return gjson.Result{}, badRequest(`request body has the key "requests" more than once`)
		}
		seen = true
		reqs = gjson.Parse(s[tm.valStart:tm.valEnd])
		reqs.Index = tm.valStart
	}
	if !seen {
		return gjson.Result{}, badRequest("requests: Field required")
	}
	if !reqs.IsArray() {
		return gjson.Result{}, badRequest("requests must be an array, got %s", jsonKind(reqs.Raw[0]))
	}
	return reqs, nil
}

// batchParams finds requests[i].params (absolute offsets kept), refusing a duplicate.
func batchParams(r gjson.Result, i int) (gjson.Result, error) {
	if !r.IsObject() {
		return gjson.Result{}, badRequest("requests[%d] must be an object, got %s", i, jsonKind(r.Raw[0]))
	}
	var params gjson.Result
	n := 0
	r.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "params" {
			params = v
			n++
		}
		return true
	})
	id := r.Get("custom_id").Str
	switch {
	case n > 1:
		return params, batchError(badRequest(`the key "params" is given more than once`), i, id)
	case n == 0:
		return params, batchError(badRequest("params: Field required"), i, id)
	case !params.IsObject():
		return params, batchError(badRequest("params must be an object, got %s", jsonKind(params.Raw[0])), i, id)
	}
	return params, nil
}

// batchError puts the request's index and custom_id in front of a rewrite error's message, so
// the client knows which of its requests the policy refused.
func batchError(err error, i int, customID string) error {
	re, ok := err.(*RequestError)
	if !ok {
		return err
	}
	out := *re
	out.Message = fmt.Sprintf("requests[%d] (custom_id %q): %s", i, customID, re.Message)
	return &out
}
