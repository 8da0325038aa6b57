package memapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"github.com/ctxproxy/ctxproxy/memoryhook"
	"github.com/ctxproxy/ctxproxy/policy"
)

// Page sizes of the hosted API: basic pages up to 100 items, full up to 20.
const (
	maxBasicPage = 100
	maxFullPage  = 20
	maxBody      = 16 << 20
)

// memoryJSON is a memory object.
type memoryJSON struct {
	Type          string  `json:"type"`
	ID            string  `json:"id"`
	MemoryStoreID string  `json:"memory_store_id"`
	Path          string  `json:"path"`
	Content       *string `json:"content"`
	SHA256        string  `json:"content_sha256"`
	Size          int64   `json:"content_size_bytes"`
	VersionID     string  `json:"memory_version_id"`
	CreatedAt     string  `json:"created_at"`
	UpdatedAt     string  `json:"updated_at"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func storeID(tenant string) string { return StoreIDPrefix + tenant }

func memoryObj(tenant string, m memoryhook.Memory, content []byte, full bool) memoryJSON {
	out := memoryJSON{Type: "memory", ID: m.ID, MemoryStoreID: storeID(tenant), Path: memoryhook.APIPath(m.Path),
		SHA256: m.SHA256, Size: m.Size, VersionID: m.VersionID, CreatedAt: stamp(m.CreatedAt), UpdatedAt: stamp(m.UpdatedAt)}
	if full {
		s := string(content)
		out.Content = &s
	}
	return out
}

// view reads ?view=, basic or full; def when absent.
func view(w http.ResponseWriter, r *http.Request, def string) (full, ok bool) {
	switch v := r.URL.Query().Get("view"); v {
	case "":
		return def == "full", true
	case "basic", "full":
		return v == "full", true
	default:
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "view must be basic or full")
		return false, false
	}
}

// page reads a listing's ?view= (basic by default) and ?limit=, between 1
// and the view's largest page (the largest when absent).
func page(w http.ResponseWriter, r *http.Request) (full bool, n int, ok bool) {
	if full, ok = view(w, r, "basic"); !ok {
		return false, 0, false
	}
	max := maxBasicPage
	if full {
		max = maxFullPage
	}
	s := r.URL.Query().Get("limit")
	if s == "" {
		return full, max, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("limit must be an integer from 1 to %d", max))
		return false, 0, false
	}
	return full, n, true
}

// listStores lists the tenants' stores the caller may see and, for a
// tenant with a scope per user or per key, those stores that have been
// used: a user's under the user's name (the store's name where the
// users are not known).
func (a *API) listStores(w http.ResponseWriter, c *call) {
	data := []any{}
	set := a.cfg.Policies.Current()
	for _, p := range set.Tenants() {
		if c.tenant != nil && c.tenant.Tenant != p.Tenant {
			continue
		}
		data = append(data, storeObj(storeRef{p, p.Tenant}, ""))
		if !p.HasSubStores() {
			continue
		}
		names, err := a.cfg.Store.SubStores(c.r.Context(), p.Tenant)
		if err != nil {
			a.storeError(w, c, err, "memory stores")
			return
		}
		users := a.usersByStore(c.r.Context(), p.Tenant)
		for _, name := range names {
			if set.StoreOwner(name) == p {
				data = append(data, storeObj(storeRef{p, name}, users[name]))
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "next_page": nil})
}

// usersByStore maps the stores of tenant's users to the users' names.
func (a *API) usersByStore(ctx context.Context, tenant string) map[string]string {
	out := map[string]string{}
	if a.cfg.Users == nil {
		return out
	}
	users, err := a.cfg.Users(ctx, tenant)
	if err != nil {
		a.cfg.Log.Warn("memory stores listed without their users' names", zap.String("tenant", tenant), zap.Error(err))
		return out
	}
	for _, u := range users {
		out[policy.UserStore(tenant, u)] = u
	}
	return out
}

// storeObj is the API's memory_store for p; user is the user whose store
// it is, when known (the store's name then).
func storeObj(p storeRef, user string) map[string]any {
	what, name := "tenant "+p.Tenant, p.Name
	if _, sub, ok := strings.Cut(p.Name, policy.KeyStoreSep); ok {
		switch {
		case user != "":
			what, name = "user "+user+" of tenant "+p.Tenant, user
		case strings.HasPrefix(sub, policy.UserStorePrefix):
			what = "a user of tenant " + p.Tenant
		default:
			what = "key " + sub + " of tenant " + p.Tenant
		}
	}
	return map[string]any{"type": "memory_store", "id": storeID(p.Name), "name": name,
		"description": "ctxproxy memory of " + what + " (" + p.File + ")", "metadata": map[string]string{},
		"created_at": stamp(time.Unix(0, 0)), "updated_at": stamp(time.Unix(0, 0)), "archived_at": nil}
}

func (a *API) getStore(w http.ResponseWriter, c *call) {
	if p, ok := a.store(w, c); ok {
		user := ""
		if p.HasSubStores() {
			user = a.usersByStore(c.r.Context(), p.Tenant)[p.Name]
		}
		writeJSON(w, http.StatusOK, storeObj(p, user))
	}
}

// listItem is a memory or a memory_prefix marker in a listing.
type listItem struct {
	key string // sort and cursor key: the API path
	mem *memoryhook.Memory
}

func (a *API) listMemories(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	q := c.r.URL.Query()
	full, n, ok := page(w, c.r)
	if !ok {
		return
	}
	prefix := q.Get("path_prefix")
	if prefix != "" && (!strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/")) {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "path_prefix must start and end with /")
		return
	}
	depth := 0
	if s := q.Get("depth"); s != "" {
		d, err := strconv.Atoi(s)
		if err != nil || d < 1 {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "depth must be a positive integer")
			return
		}
		depth = d
	}
	after := ""
	if pg := q.Get("page"); pg != "" {
		b, err := base64.RawURLEncoding.DecodeString(pg)
		if err != nil {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "invalid page cursor")
			return
		}
		after = string(b)
	}
	ms, err := a.cfg.Store.Memories(c.r.Context(), p.Name)
	if err != nil {
		a.storeError(w, c, err, "memory store")
		return
	}
	items := listing(ms, prefix, depth)
	start := sort.Search(len(items), func(i int) bool { return items[i].key > after })
	items = items[start:]
	next := any(nil)
	if len(items) > n {
		items = items[:n]
		next = base64.RawURLEncoding.EncodeToString([]byte(items[n-1].key))
	}
	data := make([]any, 0, len(items))
	for _, it := range items {
		if it.mem == nil {
			data = append(data, map[string]string{"type": "memory_prefix", "path": it.key})
			continue
		}
		obj, err := a.memoryOut(c, p.Name, *it.mem, full)
		if err != nil {
			a.storeError(w, c, err, "memory")
			return
		}
		data = append(data, obj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "next_page": next})
}

// listing filters ms by prefix (whole segments) and rolls what lies
// deeper than depth below it into memory_prefix markers, sorted by path.
func listing(ms []memoryhook.Memory, prefix string, depth int) []listItem {
	var out []listItem
	seen := map[string]bool{}
	base := strings.Count(prefix, "/")
	if prefix == "" {
		base = 1
	}
	for i := range ms {
		path := memoryhook.APIPath(ms[i].Path)
		if prefix != "" && !strings.HasPrefix(path, prefix) {
			continue
		}
		if depth > 0 {
			segs := strings.Split(path[1:], "/")
			if below := len(segs) - (base - 1); below > depth {
				marker := "/" + strings.Join(segs[:base-1+depth], "/") + "/"
				if !seen[marker] {
					seen[marker] = true
					out = append(out, listItem{key: marker})
				}
				continue
			}
		}
		out = append(out, listItem{key: path, mem: &ms[i]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// readBody decodes a JSON request body into v.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func (a *API) createMemory(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	full, ok := view(w, c.r, "basic")
	if !ok {
		return
	}
	var body struct {
		Path    *string `json:"path"`
		Content *string `json:"content"`
	}
	if !readBody(w, c.r, &body) {
		return
	}
	if body.Path == nil || body.Content == nil {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "path and content are required")
		return
	}
	m, err := a.operator(p, c).Create(c.r.Context(), *body.Path, []byte(*body.Content))
	if err != nil {
		a.storeError(w, c, err, "memory")
		return
	}
	c.audit.MemoryID, c.audit.After = m.ID, m.SHA256
	writeJSON(w, http.StatusOK, memoryObj(p.Name, m, []byte(*body.Content), full))
}

// memoryOut is m as the API shows it, with its content when full. A
// memory whose head version holds no content (a file found over the
// tenant's max_file_bytes, never read) shows content null.
func (a *API) memoryOut(c *call, tenant string, m memoryhook.Memory, full bool) (memoryJSON, error) {
	if !full {
		return memoryObj(tenant, m, nil, false), nil
	}
	v, err := a.cfg.Store.Version(c.r.Context(), tenant, m.VersionID, true)
	if err != nil {
		return memoryJSON{}, err
	}
	return memoryObj(tenant, m, v.Content, v.HasContent), nil
}

func (a *API) getMemory(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	full, ok := view(w, c.r, "full")
	if !ok {
		return
	}
	id := c.r.PathValue("mem")
	c.audit.MemoryID = id
	m, err := a.cfg.Store.MemoryByID(c.r.Context(), p.Name, id)
	if err != nil {
		a.storeError(w, c, err, "memory "+quoteID(id))
		return
	}
	obj, err := a.memoryOut(c, p.Name, m, full)
	switch {
	case err != nil:
		a.storeError(w, c, err, "memory "+quoteID(id))
	case full && obj.Content == nil:
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("memory %s (%s, %d bytes) was over the "+
			"tenant's max_file_bytes when ctxproxy found it, so its content was never read; rename it, delete it, or "+
			"shrink it on disk", quoteID(id), m.Path, m.Size))
	default:
		writeJSON(w, http.StatusOK, obj)
	}
}

func (a *API) updateMemory(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	full, ok := view(w, c.r, "basic")
	if !ok {
		return
	}
	var body struct {
		Path         *string `json:"path"`
		Content      *string `json:"content"`
		Precondition *struct {
			Type   string `json:"type"`
			SHA256 string `json:"content_sha256"`
		} `json:"precondition"`
	}
	if !readBody(w, c.r, &body) {
		return
	}
	expect := ""
	if pc := body.Precondition; pc != nil {
		if pc.Type != "content_sha256" || !isSHA(pc.SHA256) {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "precondition must be {type: content_sha256, content_sha256: <64 lowercase hex>}")
			return
		}
		expect = pc.SHA256
	}
	id := c.r.PathValue("mem")
	c.audit.MemoryID = id
	before, _ := a.cfg.Store.MemoryByID(c.r.Context(), p.Name, id)
	c.audit.Before = before.SHA256
	var content []byte
	if body.Content != nil {
		content = []byte(*body.Content)
	}
	m, err := a.operator(p, c).Update(c.r.Context(), id, content, body.Path, expect)
	if err != nil {
		a.storeError(w, c, err, "memory "+quoteID(id))
		return
	}
	c.audit.After = m.SHA256
	a.respondMemory(w, c, p, m, full)
}

// respondMemory answers with m, reading its content when full.
func (a *API) respondMemory(w http.ResponseWriter, c *call, p storeRef, m memoryhook.Memory, full bool) {
	obj, err := a.memoryOut(c, p.Name, m, full)
	if err != nil {
		a.storeError(w, c, err, "memory")
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func isSHA(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func (a *API) deleteMemory(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	expect := c.r.URL.Query().Get("expected_content_sha256")
	if expect != "" && !isSHA(expect) {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "expected_content_sha256 must be 64 lowercase hex digits")
		return
	}
	id := c.r.PathValue("mem")
	c.audit.MemoryID = id
	before, _ := a.cfg.Store.MemoryByID(c.r.Context(), p.Name, id)
	c.audit.Before = before.SHA256
	if err := a.operator(p, c).Delete(c.r.Context(), id, expect); err != nil {
		a.storeError(w, c, err, "memory "+quoteID(id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "memory_deleted"})
}

func (a *API) restoreMemory(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	full, ok := view(w, c.r, "basic")
	if !ok {
		return
	}
	var body struct {
		VersionID    string `json:"version_id"`
		Precondition *struct {
			SHA256 string `json:"content_sha256"`
		} `json:"precondition"`
	}
	if !readBody(w, c.r, &body) {
		return
	}
	if body.VersionID == "" {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "version_id is required")
		return
	}
	expect := ""
	if body.Precondition != nil {
		expect = body.Precondition.SHA256
	}
	id := c.r.PathValue("mem")
	c.audit.MemoryID, c.audit.VersionID = id, body.VersionID
	before, _ := a.cfg.Store.MemoryByID(c.r.Context(), p.Name, id)
	c.audit.Before = before.SHA256
	m, err := a.operator(p, c).Restore(c.r.Context(), id, body.VersionID, expect)
	if err != nil {
		a.storeError(w, c, err, "memory or version")
		return
	}
	c.audit.After = m.SHA256
	a.respondMemory(w, c, p, m, full)
}
