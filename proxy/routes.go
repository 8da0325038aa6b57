package proxy

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
)

// endpoint is a /v1/ route the policy applies to.
type endpoint int

const (
	epMessages endpoint = iota
	epCountTokens
	epBatchCreate
)

// route is what the proxy does with a /v1/ request.
type route struct {
	ep          endpoint
	policy      bool   // served by ep with the tenant's policy
	passthrough bool   // forwarded untouched (after the tenant check)
	path        string // the path to forward ("" keeps the request's own)
	status      int    // refused with this status when neither of the above
}

// Paths of the Messages API the policy owns, and the one route under them
// that a client may only POST to.
const (
	pathMessages    = "/v1/messages"
	pathCountTokens = "/v1/messages/count_tokens"
	pathBatches     = "/v1/messages/batches"
)

// maxUnescape bounds how many layers of percent-encoding classify peels.
const maxUnescape = 4

// classify decides what a request path is. The Messages API routes are
// matched on every spelling an upstream or a load balancer in front of it
// could take for them: any case, doubled or trailing slashes, dot segments,
// backslashes and percent-encoding (also doubled). A path in the
// /v1/messages namespace is either served as its canonical route, with the
// policy, or forwarded under its canonical spelling (batch reads), or
// refused with a 404: never forwarded as it came. ok is false for paths
// outside /v1/, which the router serves.
func classify(method, p string) (rt route, ok bool) {
	canon := canonicalPath(p)
	lower := strings.ToLower(canon)
	if strings.HasPrefix(lower, "/v1/v1/") {
		// A base URL with /v1 given to a client that adds /v1 itself:
		// refused with a hint (notFound), never passed through unrewritten.
		return route{status: http.StatusNotFound}, true
	}
	if !strings.HasPrefix(lower, pathMessages) {
		// Not the Messages API: /v1/ paths pass through as they came.
		return route{passthrough: true}, strings.HasPrefix(p, "/v1/")
	}
	switch lower {
	case pathMessages, pathCountTokens:
		ep := epMessages
		if lower == pathCountTokens {
			ep = epCountTokens
		}
		switch method {
		case http.MethodPost:
			return route{ep: ep, policy: true, path: lower}, true
		case http.MethodOptions: // CORS preflight: no body, nothing to rewrite
			return route{passthrough: true, path: lower}, true
		}
		return route{status: http.StatusMethodNotAllowed}, true
	case pathBatches:
		if method == http.MethodPost {
			return route{ep: epBatchCreate, policy: true, path: lower}, true
		}
		return route{passthrough: true, path: lower}, true // list batches
	}
	// Batch reads and actions carry a case-sensitive batch id: keep its case.
	if rest, found := strings.CutPrefix(lower, pathBatches+"/"); found && batchSubpath(rest) {
		return route{passthrough: true, path: pathBatches + canon[len(pathBatches):]}, true
	}
	return route{status: http.StatusNotFound}, true
}

// batchSubpath reports whether rest (after /v1/messages/batches/) is
// "{id}", "{id}/cancel" or "{id}/results".
func batchSubpath(rest string) bool {
	id, action, _ := strings.Cut(rest, "/")
	return batchID(id) && (action == "" || action == "cancel" || action == "results")
}

// batchID reports whether id has the shape of a batch id (msgbatch_…):
// lower-case letters, digits, '_' and '-'.
func batchID(id string) bool {
	return id != "" && strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) < 0
}

// canonicalPath is p with percent-encoding undone (up to maxUnescape
// layers), backslashes as slashes, and dot segments, doubled and trailing
// slashes removed.
func canonicalPath(p string) string {
	for range maxUnescape {
		u, err := url.PathUnescape(p)
		if err != nil || u == p {
			break
		}
		p = u
	}
	p = strings.ReplaceAll(p, `\`, "/")
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p) // no copy when p is clean already
}

// ServeHTTP sends /v1/ requests by classify and everything else (health,
// metrics, admin) through the router.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.MemoryAPI != nil && memoryStoresPath(r.URL.Path) {
		// The memory operator API is ctxproxy's own: its tokens never go upstream.
		s.cfg.MemoryAPI.ServeHTTP(w, r)
		return
	}
	rt, ok := classify(r.Method, r.URL.Path)
	if !ok {
		s.router.ServeHTTP(w, r)
		return
	}
	if rt.path != "" && rt.path != r.URL.Path {
		r = withPath(r, rt.path)
	}
	if rt.policy || rt.passthrough { // the routes that use the upstream transport
		s.trim.begin()
		defer s.trim.end()
	}
	switch {
	case rt.policy:
		s.serve(w, r, rt.ep)
	case rt.passthrough:
		s.servePassthrough(w, r)
	case rt.status == http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodPost)
		apierr.Write(w, rt.status, "invalid_request_error", "method "+r.Method+" is not allowed on "+r.URL.Path+"; use POST")
	default:
		notFound(w, r)
	}
}

// notFound answers 404 in the API's shape. A client whose
// ANTHROPIC_BASE_URL has /v1 where it should not, or lacks it, is told
// what to set: the official SDKs, Claude Code and LangChain add /v1
// themselves; the Vercel AI SDK wants it in the base URL. ctxproxy does not
// serve POST /messages: a wrong base URL is said once, not half-worked.
func notFound(w http.ResponseWriter, r *http.Request) {
	msg := "no route for " + r.Method + " " + r.URL.Path
	lower := strings.ToLower(canonicalPath(r.URL.Path))
	switch {
	case strings.HasPrefix(lower, "/v1/v1/"):
		msg += ": the base URL has /v1 once too often. Set ANTHROPIC_BASE_URL to ctxproxy's address without /v1 " +
			"(http://HOST:PORT) for the official SDKs, Claude Code and LangChain, which add /v1 themselves"
	case lower == "/messages" || strings.HasPrefix(lower, "/messages/"):
		msg += ": ctxproxy serves the Messages API at /v1/messages. Set the base URL to ctxproxy's address with /v1 " +
			"(http://HOST:PORT/v1) for clients that add only /messages (the Vercel AI SDK), and without /v1 for the official SDKs, Claude Code and LangChain"
	}
	apierr.Write(w, http.StatusNotFound, "not_found_error", msg)
}

// withPath is r for the canonical path p (what goes upstream and in logs).
func withPath(r *http.Request, p string) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = p, ""
	r2.URL = &u
	return r2
}

// pathMemoryStores is the memory operator API (package memapi).
const pathMemoryStores = "/v1/memory_stores"

// memoryStoresPath reports whether p, in any spelling, is under the memory
// operator API; such a request is never forwarded.
func memoryStoresPath(p string) bool {
	lower := strings.ToLower(canonicalPath(p))
	return lower == pathMemoryStores || strings.HasPrefix(lower, pathMemoryStores+"/")
}
