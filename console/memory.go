package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memapi"
	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// The memory pages: a tenant's file tree, a file with its versions, a diff
// between two versions, restore (behind a confirmation page), export, and
// purge (behind a typed confirmation). Content is shown only on a file's
// own page, which the operator opens on purpose.

type treeData struct {
	Rows []treeRow
	Off  bool // no memory store
}

// treeRow is a directory or a memory of the file tree, at its depth.
type treeRow struct {
	Depth int
	Dir   string // a directory's name; "" for a memory
	Name  string // a memory's file name
	M     memoryhook.Memory
}

// tree lays memories (ordered by path) out as a tree: each directory once,
// before what is in it.
func tree(ms []memoryhook.Memory) []treeRow {
	var rows []treeRow
	var open []string // the directories of the previous row
	for _, m := range ms {
		parts := strings.Split(m.Path, "/")
		dirs := parts[:len(parts)-1]
		same := 0
		for same < len(open) && same < len(dirs) && open[same] == dirs[same] {
			same++
		}
		for i := same; i < len(dirs); i++ {
			rows = append(rows, treeRow{Depth: i, Dir: dirs[i]})
		}
		open = dirs
		rows = append(rows, treeRow{Depth: len(dirs), Name: parts[len(parts)-1], M: m})
	}
	return rows
}

func (c *Console) memoryTree(w http.ResponseWriter, r *http.Request) {
	t := r.PathValue("tenant")
	d := treeData{Off: c.cfg.Memory == nil}
	if !d.Off {
		ms, err := c.cfg.Memory.Memories(r.Context(), t)
		if err != nil {
			c.fail(w, r, http.StatusServiceUnavailable, "The memory store could not be read: "+err.Error())
			return
		}
		d.Rows = tree(ms)
	}
	c.render(w, r, "memory", http.StatusOK, page{Title: t + " · memory", Tenant: t, Data: d})
}

type fileData struct {
	M        memoryhook.Memory
	Content  string
	Binary   bool
	Versions []memoryhook.Version
}

// memoryFile is one memory: its content and its versions, newest first.
func (c *Console) memoryFile(w http.ResponseWriter, r *http.Request) {
	t, id := r.PathValue("tenant"), r.PathValue("id")
	if c.cfg.Memory == nil {
		c.fail(w, r, http.StatusNotFound, "This proxy has no memory store.")
		return
	}
	ctx := r.Context()
	vs, err := c.cfg.Memory.Versions(ctx, t, memoryhook.VersionQuery{MemoryID: id})
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The memory store could not be read: "+err.Error())
		return
	}
	d := fileData{Versions: vs}
	m, err := c.cfg.Memory.MemoryByID(ctx, t, id)
	switch {
	case errors.Is(err, memoryhook.ErrNotExist) && len(vs) > 0:
		d.M = memoryhook.Memory{ID: id, Path: vs[0].Path} // deleted: its history stays
	case errors.Is(err, memoryhook.ErrNotExist):
		c.fail(w, r, http.StatusNotFound, "No memory "+id+".")
		return
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "The memory store could not be read: "+err.Error())
		return
	default:
		d.M = m
		v, err := c.cfg.Memory.Version(ctx, t, m.VersionID, true)
		if err != nil {
			c.fail(w, r, http.StatusServiceUnavailable, "The memory store could not be read: "+err.Error())
			return
		}
		d.Content, d.Binary = string(v.Content), !utf8.Valid(v.Content)
	}
	c.render(w, r, "file", http.StatusOK, page{Title: t + " · /" + d.M.Path, Tenant: t, Data: d})
}

type diffData struct {
	ID, From, To string
	Lines        []diffLine
}

type diffLine struct {
	Kind string // same, add, del
	Text string
}

// memoryDiff shows what changed from version ?from to version ?to.
func (c *Console) memoryDiff(w http.ResponseWriter, r *http.Request) {
	t, id := r.PathValue("tenant"), r.PathValue("id")
	from, to := r.URL.Query().Get("from"), r.URL.Query().Get("to")
	a, okA := c.versionOf(w, r, t, id, from)
	if !okA {
		return
	}
	b, okB := c.versionOf(w, r, t, id, to)
	if !okB {
		return
	}
	d := diffData{ID: id, From: from, To: to}
	for _, l := range strings.Split(strings.TrimSuffix(memapi.Diff(string(a.Content), string(b.Content)), "\n"), "\n") {
		kind := "same"
		switch {
		case strings.HasPrefix(l, "+ "):
			kind = "add"
		case strings.HasPrefix(l, "- "):
			kind = "del"
		}
		d.Lines = append(d.Lines, diffLine{Kind: kind, Text: l})
	}
	c.render(w, r, "diff", http.StatusOK, page{Title: t + " · diff", Tenant: t, Data: d})
}

// versionOf reads version ver of memory id, with content; it answers the
// client itself when it cannot.
func (c *Console) versionOf(w http.ResponseWriter, r *http.Request, t, id, ver string) (memoryhook.Version, bool) {
	if c.cfg.Memory == nil || ver == "" {
		c.fail(w, r, http.StatusBadRequest, "Name two versions: ?from=…&to=….")
		return memoryhook.Version{}, false
	}
	v, err := c.cfg.Memory.Version(r.Context(), t, ver, true)
	if err != nil || v.MemoryID != id {
		c.fail(w, r, http.StatusNotFound, "No version "+ver+" of memory "+id+".")
		return memoryhook.Version{}, false
	}
	return v, true
}

// restoreConfirm asks before a restore; the POST does it, if the memory
// still has the content this page was shown with (expected_sha256: its
// hash, or empty for a memory deleted meanwhile).
func (c *Console) restoreConfirm(w http.ResponseWriter, r *http.Request) {
	t, id := r.PathValue("tenant"), r.PathValue("id")
	v, ok := c.versionOf(w, r, t, id, r.URL.Query().Get("version"))
	if !ok {
		return
	}
	expect := ""
	m, err := c.cfg.Memory.MemoryByID(r.Context(), t, id)
	switch {
	case err == nil:
		expect = m.SHA256
	case !errors.Is(err, memoryhook.ErrNotExist):
		c.fail(w, r, http.StatusServiceUnavailable, "The memory store could not be read: "+err.Error())
		return
	}
	c.render(w, r, "restore", http.StatusOK, page{Title: t + " · restore", Tenant: t, Data: struct {
		ID     string
		V      memoryhook.Version
		Expect string
	}{id, v, expect}})
}

// restore writes a version's content back as a new version, by the
// signed-in operator, through the same preconditions as the model's writes:
// the content the confirmation page was shown with (expected_sha256) must
// still be there, or nothing is written.
func (c *Console) restore(w http.ResponseWriter, r *http.Request) {
	t, id := r.PathValue("tenant"), r.PathValue("id")
	if c.cfg.Memory == nil {
		c.fail(w, r, http.StatusNotFound, "This proxy has no memory store.")
		return
	}
	ver := r.PostFormValue("version")
	rec := auditOf(r)
	rec.VersionID, rec.Detail = ver, "console restore"
	expect, shown := r.PostForm["expected_sha256"]
	if !shown || len(expect) != 1 {
		c.fail(w, r, http.StatusBadRequest, "The form does not say what the memory held when it was shown (expected_sha256); nothing was written. Open the restore page again.")
		return
	}
	m, err := c.cfg.Memory.MemoryByID(r.Context(), t, id)
	switch {
	case err == nil:
		rec.Before = m.SHA256
	case !errors.Is(err, memoryhook.ErrNotExist):
		c.fail(w, r, http.StatusServiceUnavailable, "The memory store could not be read: "+err.Error())
		return
	}
	// The page showed a live memory that is gone now, or a deleted one that
	// is back: either way not what the operator confirmed.
	if (err == nil) != (expect[0] != "") {
		c.fail(w, r, http.StatusConflict, "The memory changed since the page was shown; nothing was written. Look at it again.")
		return
	}
	m, err = c.operator(r, t).Restore(r.Context(), id, ver, expect[0])
	if err != nil {
		if errors.Is(err, memoryhook.ErrPrecondition) {
			c.fail(w, r, http.StatusConflict, "The memory changed since the page was shown; nothing was written. Look at it again.")
			return
		}
		c.fail(w, r, http.StatusBadRequest, "Restore failed: "+err.Error())
		return
	}
	rec.After = m.SHA256
	http.Redirect(w, r, Prefix+"tenants/"+t+"/memory/"+m.ID+"?done=restored", http.StatusSeeOther)
}

// export downloads the tenant's memory as the operator API's JSONL export.
func (c *Console) export(w http.ResponseWriter, r *http.Request) {
	t := r.PathValue("tenant")
	if c.cfg.Memory == nil {
		c.fail(w, r, http.StatusNotFound, "This proxy has no memory store.")
		return
	}
	auditOf(r).Detail = "console export"
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="`+memapi.StoreIDPrefix+t+`.jsonl"`)
	if err := memapi.WriteExport(r.Context(), w, c.cfg.Memory, t, r.URL.Query().Get("history") == "true"); err != nil {
		auditOf(r).Detail = "console export cut short"
		c.cfg.Log.Error("console export cut short", zap.String("tenant", t), zap.Error(err))
	}
}

func (c *Console) purgeConfirm(w http.ResponseWriter, r *http.Request) {
	t := r.PathValue("tenant")
	c.render(w, r, "purge", http.StatusOK, page{Title: t + " · purge", Tenant: t, Data: memapi.StoreIDPrefix + t})
}

// purge erases every file and version of the tenant, once the operator
// typed the store's id.
func (c *Console) purge(w http.ResponseWriter, r *http.Request) {
	t := r.PathValue("tenant")
	if c.cfg.Memory == nil {
		c.fail(w, r, http.StatusNotFound, "This proxy has no memory store.")
		return
	}
	if r.PostFormValue("confirm") != memapi.StoreIDPrefix+t {
		c.fail(w, r, http.StatusBadRequest, "Type "+memapi.StoreIDPrefix+t+" to confirm; nothing was erased.")
		return
	}
	files, versions, err := c.cfg.Memory.Purge(r.Context(), t)
	rec := auditOf(r)
	if err != nil {
		rec.Detail = "console purge failed"
		c.fail(w, r, http.StatusServiceUnavailable, "Purge failed: "+err.Error())
		return
	}
	rec.Detail = "console purge: " + itoa(files) + " files, " + itoa(versions) + " versions"
	s, _ := session(r)
	c.cfg.Log.Warn("memory store purged", zap.String("tenant", t), zap.String("operator", s.who.Name),
		zap.Int("files", files), zap.Int("versions", versions))
	http.Redirect(w, r, Prefix+"tenants/"+t+"/memory?done=purged", http.StatusSeeOther)
}

// operator is the memory Operator acting for the signed-in principal.
func (c *Console) operator(r *http.Request, tenant string) memoryhook.Operator {
	s, _ := session(r)
	p := c.cfg.Policies.Current().Tenant(tenant)
	return memoryhook.Operator{St: c.cfg.Memory, Sc: memoryhook.Scope{
		Tenant: tenant, Limits: p.Memory.Limits,
		Actor: memoryhook.Actor{Type: memoryhook.ActorOperator, Tenant: tenant, Operator: s.who.Name},
	}}
}

type auditKey struct{}

// memoryRoute is tenant, for a memory page or action: each call is in the
// audit log, as the same read or write through /v1/memory_stores is
// (memapi.ServeAudited), with the status the console answered.
func (c *Console) memoryRoute(h http.HandlerFunc) http.HandlerFunc {
	return c.tenant(func(w http.ResponseWriter, r *http.Request) {
		s, _ := session(r)
		rec := &memapi.AuditRecord{Operator: s.who.Name, Tenant: r.PathValue("tenant"), Method: r.Method,
			Path: r.URL.Path, MemoryID: r.PathValue("id"), Detail: "console"}
		memapi.ServeAudited(c.cfg.Audit, c.cfg.Log, rec, w, func(w http.ResponseWriter) {
			h(w, r.WithContext(context.WithValue(r.Context(), auditKey{}, rec)))
		})
	})
}

// auditOf is the audit record of a memoryRoute call, for its handler to
// fill in.
func auditOf(r *http.Request) *memapi.AuditRecord {
	if rec, ok := r.Context().Value(auditKey{}).(*memapi.AuditRecord); ok {
		return rec
	}
	return &memapi.AuditRecord{}
}

func itoa(n int) string { return strings.TrimSpace(groupDigits(int64(n))) }
