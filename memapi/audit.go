package memapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
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

// Append writes one record.
func (a *Audit) Append(r AuditRecord) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, err = a.f.Write(append(line, '\n'))
	return err
}

// List returns the tenant's records, newest first, at most limit.
func (a *Audit) List(tenant string, limit int) ([]AuditRecord, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []AuditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r AuditRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Tenant == tenant {
			all = append(all, r)
		}
	}
	out := make([]AuditRecord, 0, min(limit, len(all)))
	for i := len(all) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, all[i])
	}
	return out, sc.Err()
}

func (a *API) listAudit(w http.ResponseWriter, c *call) {
	p, ok := a.store(w, c)
	if !ok {
		return
	}
	if a.cfg.Audit == nil {
		writeError(w, http.StatusNotFound, "not_found_error", "the audit log is off")
		return
	}
	n := 100
	if s := c.r.URL.Query().Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > 1000 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "limit must be an integer from 1 to 1000")
			return
		}
		n = v
	}
	recs, err := a.cfg.Audit.List(p.Tenant, n)
	if err != nil {
		a.storeError(w, c, err, "audit log")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": recs, "next_page": nil})
}
