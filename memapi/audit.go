package memapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
	"go.uber.org/zap"
)

// AuditRecord is one operator call: who, what, which memory, the memory's
// content_sha256 before and after.
type AuditRecord struct {
	Time      time.Time `json:"time"`
	Operator  string    `json:"operator"`
	Tenant    string    `json:"tenant,omitempty"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Status    int       `json:"status"`
	MemoryID  string    `json:"memory_id,omitempty"`
	VersionID string    `json:"version_id,omitempty"`
	Before    string    `json:"before_sha256,omitempty"`
	After     string    `json:"after_sha256,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// Bounds of a record's fields. Several come from the request (the URL's
// path, the ids in it), so each is cut before it is written: no call can
// make a line the listing cannot read, whatever it sends. Real ids are
// under 40 bytes; a cut field ends in "…" and the number of bytes cut.
const (
	maxAuditShort = 128  // operator, tenant, method, ids, shas
	maxAuditLong  = 1024 // path, detail
	// maxAuditLine is the longest line a listing reads (a bounded record,
	// escaped, is well under it); a longer one is skipped and counted.
	maxAuditLine = 64 << 10
)

// bounded returns r with every string field cut to its bound.
func (r AuditRecord) bounded() AuditRecord {
	for _, f := range []*string{&r.Operator, &r.Tenant, &r.Method, &r.MemoryID, &r.VersionID, &r.Before, &r.After} {
		*f = clip(*f, maxAuditShort)
	}
	r.Path, r.Detail = clip(r.Path, maxAuditLong), clip(r.Detail, maxAuditLong)
	return r
}

// clip cuts s to at most n bytes, on a rune boundary, saying how much went.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " more bytes)"
}

// Audit is the audit log: one JSON line per operator call, appended to a
// file (one per process; with several replicas, each keeps its own).
type Audit struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

// OpenAudit opens (creating it) the audit log at path.
func OpenAudit(path string) (*Audit, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("memory audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("memory audit log: %w", err)
	}
	return &Audit{path: path, f: f}, nil
}

// Close closes the log.
func (a *Audit) Close() error { return a.f.Close() }

// Append writes one record, its fields cut to their bounds.
func (a *Audit) Append(r AuditRecord) error {
	line, err := json.Marshal(r.bounded())
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.f.Write(append(line, '\n'))
	return err
}

// List returns the tenant's records, newest first, at most limit, and how
// many lines of the log it could not read (too long, not a record: written
// by hand, by an older version, or torn): those are skipped, never a
// reason to fail the listing.
func (a *Audit) List(tenant string, limit int) (recs []AuditRecord, skipped int, err error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	// The newest limit records, in a ring: memory bounded by limit, not by the log.
	ring := make([]AuditRecord, 0, min(limit, 1024))
	n := 0
	br := bufio.NewReaderSize(f, maxAuditLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			skipped++
			if err = skipLine(br); err != nil && !errors.Is(err, io.EOF) {
				return nil, skipped, err
			}
			continue
		}
		if len(line) > 0 {
			var r AuditRecord
			switch {
			case json.Unmarshal(line, &r) != nil:
				skipped++
			case r.Tenant == tenant:
				if len(ring) < limit {
					ring = append(ring, r)
				} else {
					ring[n%limit] = r
				}
				n++
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, skipped, err
		}
	}
	out := make([]AuditRecord, 0, len(ring))
	for i := n - 1; i >= 0 && len(out) < len(ring); i-- {
		out = append(out, ring[i%limit])
	}
	return out, skipped, nil
}

// skipLine reads past the rest of a line too long for br's buffer.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

func (a *API) listAudit(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	if a.cfg.Audit == nil {
		apierr.Write(w, http.StatusNotFound, "not_found_error", "the audit log is off")
		return
	}
	n := 100
	if s := c.r.URL.Query().Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1000 {
			apierr.Write(w, http.StatusBadRequest, "invalid_request_error", "limit must be an integer from 1 to 1000")
			return
		}
		n = v
	}
	recs, skipped, err := a.cfg.Audit.List(p.Name, n)
	if err != nil {
		a.storeError(w, c, err, "audit log")
		return
	}
	if skipped > 0 {
		a.cfg.Log.Warn("memory audit log has lines it cannot read; the listing skips them",
			zap.String("tenant", p.Name), zap.Int("skipped_lines", skipped))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": recs, "next_page": nil, "skipped_lines": skipped})
}
