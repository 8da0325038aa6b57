package proxy

import (
	"bytes"

	"github.com/ctxproxy/ctxproxy/shadow"
)

// The policy lab (package shadow): a sampled Messages request keeps a copy of the client's body,
// and once its first upstream call has answered 200 and been accounted, the lab measures the
// tenant's candidates on it in the background. Threaded requests are not measured (their body
// lacks the history); nothing of the lab reaches the client.

// shadowRun is the exchange's part in the policy lab: opened by openShadow, handed over (and
// emptied) by shadowCall (accounting.go, at the end of the call it hands over).
type shadowRun struct {
	req *shadow.Request // nil: not sampled, or handed to the lab already
}

// openShadow samples a Messages request for the lab, before the policy rewrites body (which
// may reuse its buffer).
func (x *exchange) openShadow(body []byte) shadowRun {
	if x.ep != epMessages || !x.s.cfg.Lab.Sample(x.who.pol) {
		return shadowRun{}
	}
	return shadowRun{req: &shadow.Request{Policy: x.who.pol, Body: bytes.Clone(body)}}
}
