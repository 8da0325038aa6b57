package memapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"go.uber.org/zap"

	"github.com/ctxproxy/ctxproxy/memoryhook"
)

// exportLine is one line of an export: a memory (current content) or,
// with ?history=true, a version.
type exportLine struct {
	Type          string `json:"type"` // memory
	ID            string `json:"id"`
	Path          string `json:"path"`
	Content       string `json:"content"`
	ContentBase64 []byte `json:"content_base64,omitempty"` // for content that is not UTF-8
	SHA256        string `json:"content_sha256"`
	CreatedAt     string `json:"created_at"`
	UpdatedAt     string `json:"updated_at"`
}

// export streams the tenant's memories as JSONL, newest versions after
// them with ?history=true.
func (a *API) export(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	if err := WriteExport(c.r.Context(), w, a.cfg.Store, p.Name, c.r.URL.Query().Get("history") == "true"); err != nil {
		a.cfg.Log.Error("memory export cut short", zap.String("tenant", p.Name), zap.Error(err))
	}
}

// exportPage is how many versions an export reads at a time: never the
// whole history's content at once.
const exportPage = 100

// WriteExport writes tenant's memories to w as JSONL, one memory line each
// (current content), then, with history, every version newest first. A
// memory whose content was never read (a file found over the tenant's
// max_file_bytes) has no line. The operator API, the console and the CLI
// export through it. An error past the first line leaves w with a stream
// cut short.
func WriteExport(ctx context.Context, w io.Writer, st memoryhook.Governed, tenant string, history bool) error {
	ms, err := st.Memories(ctx, tenant)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for _, m := range ms {
		v, err := st.Version(ctx, tenant, m.VersionID, true)
		if err != nil {
			return err
		}
		if !v.HasContent {
			continue
		}
		line := exportLine{Type: "memory", ID: m.ID, Path: memoryhook.APIPath(m.Path), SHA256: m.SHA256,
			CreatedAt: stamp(m.CreatedAt), UpdatedAt: stamp(m.UpdatedAt)}
		if utf8.Valid(v.Content) {
			line.Content = string(v.Content)
		} else {
			line.ContentBase64 = v.Content
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	if !history {
		return nil
	}
	for before := int64(0); ; {
		vs, err := st.Versions(ctx, tenant, memoryhook.VersionQuery{Content: true, BeforeSeq: before, Limit: exportPage})
		if err != nil {
			return err
		}
		for _, v := range vs {
			if err := enc.Encode(versionObj(tenant, v, true)); err != nil {
				return err
			}
		}
		if len(vs) < exportPage || vs[len(vs)-1].Seq <= 1 {
			return nil
		}
		before = vs[len(vs)-1].Seq
	}
}

// importStore writes the memory lines of an export (JSONL body): a path
// that exists is updated, else created; each write is a new version by
// the operator. Version lines are history of the source and are skipped.
func (a *API) importStore(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	ctx := c.r.Context()
	op := a.operator(p, c)
	ms, err := a.cfg.Store.Memories(ctx, p.Name)
	if err != nil {
		a.storeError(w, c, err, "memory store")
		return
	}
	byPath := map[string]memoryhook.Memory{}
	for _, m := range ms {
		byPath[memoryhook.APIPath(m.Path)] = m
	}
	counts := map[string]int{"created": 0, "updated": 0, "unchanged": 0, "skipped_versions": 0}
	sc := bufio.NewScanner(io.LimitReader(c.r.Body, 1<<30))
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for n := 1; sc.Scan(); n++ {
		var line exportLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "line "+itoa(n)+": invalid JSON: "+err.Error())
			return
		}
		switch line.Type {
		case "memory_version":
			counts["skipped_versions"]++
			continue
		case "memory":
		default:
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "line "+itoa(n)+": type must be memory or memory_version")
			return
		}
		content := []byte(line.Content)
		if line.ContentBase64 != nil {
			content = line.ContentBase64
		}
		if m, ok := byPath[line.Path]; ok {
			if m.SHA256 == memoryhook.SHA256Hex(content) {
				counts["unchanged"]++
				continue
			}
			_, err = op.Update(ctx, m.ID, content, nil, "")
			counts["updated"]++
		} else {
			_, err = op.Create(ctx, line.Path, content)
			counts["created"]++
		}
		if err != nil {
			a.storeError(w, c, err, "memory "+quoteID(line.Path))
			return
		}
	}
	if err := sc.Err(); err != nil {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "reading the export: "+err.Error())
		return
	}
	out := map[string]any{"type": "memory_import", "memory_store_id": storeID(p.Name)}
	for k, v := range counts {
		out[k] = v
	}
	writeJSON(w, http.StatusOK, out)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// purge removes every file and version of the tenant. The body must name
// the store: {"confirm": "memstore_<tenant>"}.
func (a *API) purge(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	var body struct {
		Confirm string `json:"confirm"`
	}
	if !readBody(w, c.r, &body) {
		return
	}
	if body.Confirm != storeID(p.Name) {
		apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "purge erases the store for good: send {\"confirm\": \""+storeID(p.Name)+"\"}")
		return
	}
	files, versions, err := a.cfg.Store.Purge(c.r.Context(), p.Name)
	if err != nil {
		a.storeError(w, c, err, "memory store")
		return
	}
	a.cfg.Log.Warn("memory store purged", zap.String("tenant", p.Name), zap.String("operator", c.operator),
		zap.Int("files", files), zap.Int("versions", versions))
	c.audit.Detail = "purged " + itoa(files) + " files and " + itoa(versions) + " versions"
	writeJSON(w, http.StatusOK, map[string]any{"type": "memory_store_purged", "id": storeID(p.Name),
		"files": files, "versions": versions})
}
