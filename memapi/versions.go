package memapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// versionJSON is a memory_version object. created_by carries the hosted
// actor fields plus ctxproxy's request_id and upstream_message_id.
type versionJSON struct {
	Type          string            `json:"type"`
	ID            string            `json:"id"`
	MemoryID      string            `json:"memory_id"`
	MemoryStoreID string            `json:"memory_store_id"`
	Operation     string            `json:"operation"`
	Path          *string           `json:"path"`
	Content       *string           `json:"content"`
	SHA256        *string           `json:"content_sha256"`
	Size          *int64            `json:"content_size_bytes"`
	CreatedBy     memoryhook.Actor  `json:"created_by"`
	CreatedAt     string            `json:"created_at"`
	RedactedAt    *string           `json:"redacted_at"`
	RedactedBy    *memoryhook.Actor `json:"redacted_by"`
}

func versionObj(tenant string, v memoryhook.Version, full bool) versionJSON {
	out := versionJSON{Type: "memory_version", ID: v.ID, MemoryID: v.MemoryID, MemoryStoreID: storeID(tenant),
		Operation: v.Op, CreatedBy: v.Actor, CreatedAt: stamp(v.At), RedactedBy: v.RedactedBy}
	if v.Path != "" {
		p := memoryhook.APIPath(v.Path)
		out.Path = &p
	}
	if v.SHA256 != "" {
		sha, size := v.SHA256, v.Size
		out.SHA256, out.Size = &sha, &size
	}
	if full && v.HasContent {
		s := string(v.Content)
		out.Content = &s
	}
	if !v.RedactedAt.IsZero() {
		s := stamp(v.RedactedAt)
		out.RedactedAt = &s
	}
	return out
}

// versionQuery reads the list filters; ok false when it answered an error.
func versionQuery(w http.ResponseWriter, r *http.Request) (memoryhook.VersionQuery, bool) {
	q := r.URL.Query()
	vq := memoryhook.VersionQuery{MemoryID: q.Get("memory_id"), Op: q.Get("operation"), RequestID: q.Get("request_id"),
		KeyID: q.Get("api_key_id"), Operator: q.Get("service_account_id")}
	switch vq.Op {
	case "", memoryhook.OpCreated, memoryhook.OpModified, memoryhook.OpDeleted:
	default:
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "operation must be created, modified or deleted")
		return vq, false
	}
	for key, dst := range map[string]*time.Time{"created_at[gte]": &vq.Since, "created_at[lte]": &vq.Until} {
		if s := q.Get(key); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				apierr.Write(w, http.StatusBadRequest, "invalid_request_error", key+" must be an RFC 3339 time")
				return vq, false
			}
			*dst = t
		}
	}
	if pg := q.Get("page"); pg != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(pg, "seq_"), 10, 64)
		if err != nil || n <= 0 || !strings.HasPrefix(pg, "seq_") {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "invalid page cursor")
			return vq, false
		}
		vq.BeforeSeq = n
	}
	return vq, true
}

func (a *API) listVersions(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	full, n, ok := page(w, c.r)
	if !ok {
		return
	}
	vq, ok := versionQuery(w, c.r)
	if !ok {
		return
	}
	vq.Limit, vq.Content = n+1, full
	vs, err := a.cfg.Store.Versions(c.r.Context(), p.Name, vq)
	if err != nil {
		a.storeError(w, c, err, "memory store")
		return
	}
	next := any(nil)
	if len(vs) > n {
		vs = vs[:n]
		next = "seq_" + strconv.FormatInt(vs[n-1].Seq, 10)
	}
	data := make([]versionJSON, len(vs))
	for i, v := range vs {
		data[i] = versionObj(p.Name, v, full)
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "next_page": next})
}

// version loads {ver} of tenant p.
func (a *API) version(w http.ResponseWriter, c *call, p storeRef, id string, content bool) (memoryhook.Version, bool) {
	v, err := a.cfg.Store.Version(c.r.Context(), p.Name, id, content)
	if err != nil {
		a.storeError(w, c, err, "memory version "+quoteID(id))
		return v, false
	}
	return v, true
}

func (a *API) getVersion(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	full, ok := view(w, c.r, "full")
	if !ok {
		return
	}
	if v, ok := a.version(w, c, p, c.r.PathValue("ver"), full); ok {
		writeJSON(w, http.StatusOK, versionObj(p.Name, v, full))
	}
}

func (a *API) redactVersion(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	id := c.r.PathValue("ver")
	c.audit.VersionID = id
	v, err := a.cfg.Store.Redact(c.r.Context(), p.Name, id, OperatorActor(c.operator))
	if err != nil {
		a.storeError(w, c, err, "memory version "+quoteID(id))
		return
	}
	c.audit.MemoryID = v.MemoryID
	writeJSON(w, http.StatusOK, versionObj(p.Name, v, false))
}

// diffVersion answers the line diff from ?from= (default: the version
// before it of the same memory) to {ver}.
func (a *API) diffVersion(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	to, ok := a.version(w, c, p, c.r.PathValue("ver"), true)
	if !ok {
		return
	}
	var from memoryhook.Version
	if id := c.r.URL.Query().Get("from"); id != "" {
		if from, ok = a.version(w, c, p, id, true); !ok {
			return
		}
	} else {
		vs, err := a.cfg.Store.Versions(c.r.Context(), p.Name, memoryhook.VersionQuery{MemoryID: to.MemoryID, BeforeSeq: to.Seq, Limit: 1, Content: true})
		if err != nil {
			a.storeError(w, c, err, "memory store")
			return
		}
		if len(vs) > 0 {
			from = vs[0]
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"type": "memory_version_diff", "from": nullable(from.ID), "to": to.ID,
		"diff": Diff(string(from.Content), string(to.Content))})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
