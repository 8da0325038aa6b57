// Package memapi is the memory operator API: the hosted memory stores'
// REST shape (/v1/memory_stores/..., as the memory stores reference
// describes it) over ctxproxy's own stores, one store per tenant, so that the official SDKs'
// memoryStores clients work against ctxproxy with a base URL and an
// operator token. Beyond the hosted API: restore, diff, export, import,
// purge and an audit log of every operator call.
//
// Where ctxproxy differs from the hosted API:
//   - a store is a tenant (id memstore_<tenant>, name <tenant>), or one
//     key's store of a tenant with memory per key (the default tenant's:
//     memstore_default~<key id>), or one user's of a tenant with a scope
//     per user (memstore_<tenant>~u-<hash>, name the user; it is also
//     found as memstore_<tenant>~<user>); stores are made and removed by policy
//     files and use, so create, update, archive and delete of a store
//     answer 400;
//   - a memory's path is the memory tool's without /memories;
//   - the memory tool has directories, hosted stores do not: a path that is
//     a directory conflicts like an ancestor memory (409
//     memory_path_conflict_error with an empty conflicting_memory_id);
//   - an update of both content and path makes two versions (content, then
//     the rename);
//   - a version's created_by also carries the request id and upstream
//     message id of the model's call (api_actor), or the operator token's
//     name (service_account_actor); adopted files show system_actor;
//   - version lists filter by request_id besides api_key_id and friends.
package memapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/internal/apikey"
	"go.uber.org/zap"

	operatorauth "github.com/ctxproxy/ctxproxy/admin"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// Config is what the API needs.
type Config struct {
	Store      memoryhook.Governed
	Policies   *policy.Store
	AdminToken string // "" : only tenants' operator tokens are accepted
	Audit      *Audit // nil: calls are not audited (tests)
	Log        *zap.Logger
	// Users lists the users of a tenant's keys, so that a user's store
	// (named by a hash of the user) is listed under the user's name; nil:
	// listed under the store's own name.
	Users func(ctx context.Context, tenant string) ([]string, error)
}

// API is the operator API's http.Handler.
type API struct {
	cfg    Config
	tokens operatorauth.Auth // the same tokens as /admin and the console
	mux    *http.ServeMux
}

// StoreIDPrefix makes a store id from a tenant name.
const StoreIDPrefix = "memstore_"

// AdminName is the operator name of --admin-token in versions and audit.
const AdminName = "admin"

// New builds the API.
func New(cfg Config) *API {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	a := &API{cfg: cfg, tokens: operatorauth.PolicyAuth(cfg.AdminToken, cfg.Policies), mux: http.NewServeMux()}
	const s = "/v1/memory_stores/{store}"
	routes := map[string]handler{
		"GET /v1/memory_stores":                       a.listStores,
		"GET " + s:                                    a.getStore,
		"GET " + s + "/memories":                      a.listMemories,
		"POST " + s + "/memories":                     a.createMemory,
		"GET " + s + "/memories/{mem}":                a.getMemory,
		"POST " + s + "/memories/{mem}":               a.updateMemory,
		"DELETE " + s + "/memories/{mem}":             a.deleteMemory,
		"POST " + s + "/memories/{mem}/restore":       a.restoreMemory,
		"GET " + s + "/memory_versions":               a.listVersions,
		"GET " + s + "/memory_versions/{ver}":         a.getVersion,
		"POST " + s + "/memory_versions/{ver}/redact": a.redactVersion,
		"GET " + s + "/memory_versions/{ver}/diff":    a.diffVersion,
		"GET " + s + "/export":                        a.export,
		"POST " + s + "/import":                       a.importStore,
		"POST " + s + "/purge":                        a.purge,
		"GET " + s + "/audit":                         a.listAudit,
		"POST /v1/memory_stores":                      a.storesByPolicy,
		"POST " + s:                                   a.storesByPolicy,
		"DELETE " + s:                                 a.storesByPolicy,
		"POST " + s + "/archive":                      a.storesByPolicy,
	}
	for pattern, h := range routes {
		a.mux.Handle(pattern, a.auth(h))
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apierr.Write(w, http.StatusNotFound, "not_found_error", "no route for "+r.Method+" "+r.URL.Path)
	})
	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// call is one authenticated request.
type call struct {
	r        *http.Request
	operator string         // the token's name
	tenant   *policy.Policy // a tenant token's own tenant; nil for the admin token
	audit    AuditRecord
}

type handler func(w http.ResponseWriter, c *call)

func (a *API) auth(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{r: r}
		if apikey.From(r.Header) == "" {
			apierr.Write(w, http.StatusUnauthorized, "authentication_error", "the memory operator API needs an operator token (x-api-key or Authorization: Bearer)")
			return
		}
		who, ok := a.tokens.Authorize(r)
		if !ok {
			apierr.Write(w, http.StatusUnauthorized, "authentication_error", "invalid operator token")
			return
		}
		c.operator = who.Name
		if who.Tenant != "" {
			if c.tenant = a.cfg.Policies.Current().Tenant(who.Tenant); c.tenant == nil {
				apierr.Write(w, http.StatusUnauthorized, "authentication_error", "invalid operator token")
				return
			}
		}
		c.audit = AuditRecord{Operator: c.operator, Method: r.Method, Path: r.URL.Path}
		ServeAudited(a.cfg.Audit, a.cfg.Log, &c.audit, w, func(w http.ResponseWriter) { h(w, c) })
	})
}

// ServeAudited serves one operator call (h) and appends rec to the audit
// log with the status h answered, once h is done; h fills in what it learns
// (tenant, memory, versions, content hashes, detail) as it goes. Every
// operator surface that reads or writes memory (this API, the console)
// audits its calls through this one function. A nil log audits nothing.
func ServeAudited(log *Audit, zl *zap.Logger, rec *AuditRecord, w http.ResponseWriter, h func(http.ResponseWriter)) {
	sw := &statusWriter{ResponseWriter: w}
	h(sw)
	if log == nil {
		return
	}
	rec.Time = time.Now().UTC()
	rec.Status = sw.status
	if rec.Status == 0 {
		rec.Status = http.StatusOK // net/http's answer to a handler that wrote nothing
	}
	if err := log.Append(*rec); err != nil {
		zl.Error("memory audit log write failed", zap.String("tenant", rec.Tenant), zap.Error(err))
	}
}

// statusWriter remembers the status for the audit log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// storeRef is a memory store: the policy of its tenant, whose limits,
// retention and operators it has, and its name in the memory store (the
// tenant's, or one of its keys' stores, tenant~<key id>).
type storeRef struct {
	*policy.Policy
	Name string
}

// store resolves {store} to a store the caller may see; it answers 404
// otherwise (a tenant token learns nothing of other tenants).
func (a *API) store(w http.ResponseWriter, c *call) (storeRef, bool) {
	id := c.r.PathValue("store")
	name, ok := strings.CutPrefix(id, StoreIDPrefix)
	p, name := a.cfg.Policies.Current().ResolveStore(name)
	if !ok || p == nil || (c.tenant != nil && c.tenant.Tenant != p.Tenant) {
		apierr.Write(w, http.StatusNotFound, "not_found_error", "memory store "+quoteID(id)+" not found")
		return storeRef{}, false
	}
	c.audit.Tenant = name
	return storeRef{p, name}, true
}

func quoteID(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// operator returns the memoryhook.Operator for store p and caller c.
func (a *API) operator(p storeRef, c *call) memoryhook.Operator {
	return memoryhook.Operator{St: a.cfg.Store, Sc: memoryhook.Scope{
		Tenant: p.Name,
		Limits: p.Memory.Limits,
		Actor:  OperatorActor(c.operator),
	}}
}

// OperatorActor is the actor of an operator's writes.
func OperatorActor(name string) memoryhook.Actor {
	return memoryhook.Actor{Type: memoryhook.ActorOperator, Operator: name}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// storeError answers a store failure in the hosted API's terms.
func (a *API) storeError(w http.ResponseWriter, c *call, err error, what string) {
	var pc *memoryhook.PathConflictError
	var inv *memoryhook.InvalidError
	switch {
	case errors.Is(err, memoryhook.ErrNotExist):
		apierr.Write(w, http.StatusNotFound, "not_found_error", what+" not found")
	case errors.Is(err, memoryhook.ErrPrecondition):
		apierr.Write(w, http.StatusConflict, "memory_precondition_failed_error", "the memory's content_sha256 does not match the precondition, or it changed meanwhile")
	case errors.Is(err, memoryhook.ErrHeadVersion):
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "the head version of a live memory cannot be redacted")
	case errors.As(err, &pc):
		apierr.Write(w, http.StatusConflict, "memory_path_conflict_error", "a memory or directory is in the way at "+pc.Path,
			apierr.String("conflicting_memory_id", pc.MemoryID), apierr.String("conflicting_path", pc.Path))
	case errors.As(err, &inv):
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", inv.Msg)
	default:
		a.cfg.Log.Error("memory operator call failed", zap.String("tenant", c.audit.Tenant),
			zap.String("operator", c.operator), zap.String("path", c.r.URL.Path), zap.Error(err))
		apierr.Write(w, http.StatusServiceUnavailable, "api_error", "memory store unavailable")
	}
}

func (a *API) storesByPolicy(w http.ResponseWriter, c *call) {
	apierr.Write(w, http.StatusBadRequest, "invalid_request_error",
		"ctxproxy memory stores are the tenants of the policy files: add, change or remove a tenant's policy file instead")
}
