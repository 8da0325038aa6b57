package memoryhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fileHistory keeps the file store's versions: one append-only log per
// tenant, <store>/.history/<tenant>.jsonl, outside every tenant's tree (a
// tenant name never starts with '.'), so the model never sees it.
//
// Crash safety (a write and its versions both or neither): a write appends
// its versions as an intent record and fsyncs it before it touches the
// tenant's files, then appends a commit record. An intent with no commit or
// abort after it is settled when the log is next loaded (and at once when
// the write fails): if the files show the write happened it is committed,
// else aborted. Every file operation is one atomic rename except the
// delete of a directory; a delete cut half way is finished, since its
// intent is durable. A torn last line is an intent whose write never began
// (the write waits for its fsync) and is cut off.
//
// Loading a tenant's log also adopts what no version knows: files found on
// disk (written before history existed, or by hand) get a created or
// modified version by the system actor, vanished ones a deleted version.
type fileHistory struct {
	root *os.Root // <store>/.history
	mu   sync.Mutex
	logs map[string]*tenantLog
}

// historyDir is the store subdirectory holding the logs.
const historyDir = ".history"

// crashHook is called at each step of a versioned write (tests kill the
// process there).
var crashHook = func(step string) {}

// tenantLog is one tenant's log and its index. Writers hold the tenant's
// write lock and mu; readers take mu.RLock.
type tenantLog struct {
	mu   sync.RWMutex
	f    *os.File // the log, opened for append
	next int64    // the next tx number
	seq  int64    // the last version's Seq
	vers []*fver  // committed versions, oldest first
	byID map[string]*fver
	mems map[string]*Memory // live memories by id
	live map[string]*Memory // live memories by Path.Rel()
}

// fver is an indexed version: its metadata and where its content is.
type fver struct {
	Version
	off, n int64 // the log line holding it
	i      int   // its index in that line's versions
}

// logRec is one log line.
type logRec struct {
	T    string   `json:"t"` // "tx", "c" (commit) or "a" (abort)
	N    int64    `json:"n"`
	Op   string   `json:"op,omitempty"` // create, update, delete, rename, adopt, kept
	Path string   `json:"path,omitempty"`
	To   string   `json:"to,omitempty"`
	V    []logVer `json:"v,omitempty"`
}

type logVer struct {
	ID         string     `json:"id"`
	Mem        string     `json:"mem"`
	Op         string     `json:"op"`
	Seq        int64      `json:"seq"`
	Path       string     `json:"path,omitempty"`
	Content    []byte     `json:"content,omitempty"`
	Has        bool       `json:"has,omitempty"`
	SHA        string     `json:"sha,omitempty"`
	Size       int64      `json:"size,omitempty"`
	Actor      Actor      `json:"actor"`
	At         time.Time  `json:"at"`
	RedactedAt *time.Time `json:"redacted_at,omitempty"`
	RedactedBy *Actor     `json:"redacted_by,omitempty"`
}

func (v *logVer) version() Version {
	out := Version{ID: v.ID, MemoryID: v.Mem, Op: v.Op, Path: v.Path, SHA256: v.SHA, Size: v.Size,
		Actor: v.Actor, At: v.At, RedactedBy: v.RedactedBy, Seq: v.Seq}
	if v.RedactedAt != nil {
		out.RedactedAt = *v.RedactedAt
	}
	return out
}

func newFileHistory(store *os.Root) (*fileHistory, error) {
	if err := store.Mkdir(historyDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("memory history: %w", err)
	}
	fi, err := store.Lstat(historyDir)
	if err != nil {
		return nil, fmt.Errorf("memory history: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("memory history: %s is not a directory", historyDir)
	}
	r, err := store.OpenRoot(historyDir)
	if err != nil {
		return nil, fmt.Errorf("memory history: %w", err)
	}
	return &fileHistory{root: r, logs: map[string]*tenantLog{}}, nil
}

func logName(tenant string) string { return tenant + ".jsonl" }

// load returns the tenant's log, reading, settling and reconciling it the
// first time. Call with the tenant's write lock held; tr is its root. A
// file over lim's MaxFileBytes (the default when lim has none) is adopted
// without being read.
func (h *fileHistory) load(ctx context.Context, tr *os.Root, tenant string, lim Limits) (*tenantLog, error) {
	h.mu.Lock()
	l := h.logs[tenant]
	h.mu.Unlock()
	if l != nil {
		return l, nil
	}
	l, pending, err := h.read(tenant)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		if err := l.settle(tr, p.rec, p.off, p.n); err != nil {
			l.f.Close()
			return nil, err
		}
	}
	if err := l.reconcile(ctx, tr, lim.OrDefaults().MaxFileBytes); err != nil {
		l.f.Close()
		return nil, err
	}
	h.mu.Lock()
	h.logs[tenant] = l
	h.mu.Unlock()
	return l, nil
}

type pendingRec struct {
	rec    *logRec
	off, n int64
}

// read parses a tenant's log into a fresh index; it returns the intents
// without an outcome, in order.
func (h *fileHistory) read(tenant string) (*tenantLog, []pendingRec, error) {
	f, err := h.root.OpenFile(logName(tenant), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("memory history of %s: %w", tenant, err)
	}
	l := &tenantLog{f: f, byID: map[string]*fver{}, mems: map[string]*Memory{}, live: map[string]*Memory{}}
	pending := map[int64]pendingRec{}
	var order []int64
	br := bufio.NewReaderSize(f, 64<<10)
	var off int64
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF && len(line) > 0 {
			break // a torn last line: cut below
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("memory history of %s: %w", tenant, err)
		}
		var rec logRec
		if err := json.Unmarshal(line, &rec); err != nil {
			if _, perr := br.Peek(1); perr == io.EOF {
				break // torn last line
			}
			f.Close()
			return nil, nil, fmt.Errorf("memory history of %s: corrupt record at byte %d: %w", tenant, off, err)
		}
		n := int64(len(line))
		switch rec.T {
		case "tx":
			pending[rec.N] = pendingRec{rec: &rec, off: off, n: n}
			order = append(order, rec.N)
			l.next = max(l.next, rec.N+1)
		case "c":
			if p, ok := pending[rec.N]; ok {
				l.apply(p.rec, p.off, p.n)
				delete(pending, rec.N)
			}
		case "a":
			delete(pending, rec.N)
		}
		off += n
	}
	// Cut a torn tail so appends start on a line of their own.
	if err := f.Truncate(off); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("memory history of %s: %w", tenant, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("memory history of %s: %w", tenant, err)
	}
	var out []pendingRec
	for _, n := range order {
		if p, ok := pending[n]; ok {
			out = append(out, p)
		}
	}
	return l, out, nil
}

// apply adds a committed record's versions to the index.
func (l *tenantLog) apply(rec *logRec, off, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range rec.V {
		v := &rec.V[i]
		fv := &fver{Version: v.version(), off: off, n: n, i: i}
		l.vers = append(l.vers, fv)
		l.byID[v.ID] = fv
		l.seq = max(l.seq, v.Seq)
		m := l.mems[v.Mem]
		if v.Op == OpDeleted {
			if m != nil {
				if l.live[m.Path] == m {
					delete(l.live, m.Path)
				}
				delete(l.mems, v.Mem)
			}
			continue
		}
		if m == nil {
			m = &Memory{ID: v.Mem, CreatedAt: v.At}
			l.mems[v.Mem] = m
		}
		if v.RedactedAt != nil {
			continue // never a live head: a later version gives the state
		}
		if l.live[m.Path] == m {
			delete(l.live, m.Path)
		}
		m.Path, m.SHA256, m.Size = v.Path, v.SHA, v.Size
		m.VersionID, m.UpdatedAt = v.ID, v.At
		l.live[m.Path] = m
	}
}

// append writes one record; sync makes it durable first.
func (l *tenantLog) append(rec *logRec, sync bool) (off, n int64, err error) {
	line, err := json.Marshal(rec)
	if err != nil {
		return 0, 0, err
	}
	line = append(line, '\n')
	off, err = l.f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, 0, err
	}
	if _, err := l.f.Write(line); err != nil {
		// A partial line would hide every later record: cut it.
		l.f.Truncate(off)
		return 0, 0, err
	}
	if sync {
		if err := l.f.Sync(); err != nil {
			return 0, 0, err
		}
	}
	return off, int64(len(line)), nil
}

// commit records rec's outcome as done and indexes it. A commit line lost
// to a crash is restored by settle at the next load, so it is not synced.
func (l *tenantLog) commit(rec *logRec, off, n int64) {
	l.append(&logRec{T: "c", N: rec.N}, false) //nolint:errcheck // settle redoes it
	l.apply(rec, off, n)
}

// settle decides an intent whose outcome is unknown by looking at the
// files, finishing a half-done directory delete.
func (l *tenantLog) settle(tr *os.Root, rec *logRec, off, n int64) error {
	done, err := happened(tr, rec)
	if err != nil {
		return fmt.Errorf("memory history: settle record %d: %w", rec.N, err)
	}
	return l.decide(rec, off, n, done)
}

// decide records rec's outcome.
func (l *tenantLog) decide(rec *logRec, off, n int64, done bool) error {
	if done {
		l.commit(rec, off, n)
		return nil
	}
	_, _, err := l.append(&logRec{T: "a", N: rec.N}, true)
	return err
}

func exists(tr *os.Root, rel string) (bool, error) {
	if rel == "" {
		rel = "."
	}
	_, err := tr.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	return err == nil, err
}

// gone reports an error of opening a file the tool wrote or a walk
// listed that says no such file is there now: removed, or replaced by a
// directory or a link (from outside the tool, which makes neither there).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotFile) || errors.Is(err, syscall.ELOOP)
}

// happened reports whether the files show rec's write.
func happened(tr *os.Root, rec *logRec) (bool, error) {
	switch rec.Op {
	case "create", "update":
		// Whatever is at the path now (a file planted meanwhile may be of
		// any size) is compared by size, then hashed as it streams by.
		sha, size, err := hashFile(tr, rec.Path, rec.V[0].Size)
		if gone(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return size == rec.V[0].Size && sha == rec.V[0].SHA, nil
	case "rename":
		to, err := exists(tr, rec.To)
		if err != nil || !to {
			return false, err
		}
		from, err := exists(tr, rec.Path)
		return !from, err
	case "delete":
		here, err := exists(tr, rec.Path)
		if err != nil || !here {
			return !here, err
		}
		for _, v := range rec.V {
			if ok, err := exists(tr, v.Path); err != nil || !ok {
				// Begun: finish it, the intent stands.
				if err := tr.RemoveAll(rec.Path); err != nil {
					return false, err
				}
				return true, nil
			}
		}
		return false, nil
	}
	return true, nil // adopt, kept: nothing on the tenant's tree to check
}

// tmpName is writeAtomic's temporary file: never a memory.
var tmpName = regexp.MustCompile(`^\.tmp-[0-9a-f]{16}$`)

// adoptBatchBytes bounds the content one adopt record holds: adoption
// writes as many records as it needs, never one the size of the tree.
const adoptBatchBytes = 4 << 20

// reconcile adopts the files no version knows, and records files gone. A
// file over max bytes is adopted without its content (see adoption.file).
func (l *tenantLog) reconcile(ctx context.Context, tr *os.Root, max int64) error {
	seen := map[string]bool{}
	b := &adoption{l: l, actor: Actor{Type: ActorSystem}, at: time.Now().UTC()}
	top, err := tr.Lstat(".")
	if err != nil {
		return fmt.Errorf("memory history: adopt files: %w", err)
	}
	// walkTree, not fs.WalkDir: linear in the entries at any depth.
	err = walkTree(tr, ".", top, func(e walkEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A hard-linked file (planted: the tool makes none) is no memory:
		// its bytes may be another tenant's or the host's.
		if !e.Info.Mode().IsRegular() || tmpName.MatchString(e.Name) || links(e.Info) > 1 {
			return nil
		}
		seen[e.Rel] = true
		return b.file(e, l.live[e.Rel], max)
	})
	if err != nil {
		return fmt.Errorf("memory history: adopt files: %w", err)
	}
	var vanished []*Memory
	for path, m := range l.live {
		if !seen[path] {
			vanished = append(vanished, m)
		}
	}
	for _, m := range vanished {
		if err := b.add(l.newVer(m.ID, OpDeleted, m.Path, nil, b.actor, b.at)); err != nil {
			return fmt.Errorf("memory history: adopt files: %w", err)
		}
	}
	if err := b.flush(); err != nil {
		return fmt.Errorf("memory history: adopt files: %w", err)
	}
	return nil
}

// adoption is reconcile's versions, written in records of about
// adoptBatchBytes of content each.
type adoption struct {
	l     *tenantLog
	rec   *logRec
	bytes int
	actor Actor
	at    time.Time
}

// file adopts walked file e, the live memory m at its path (nil if none),
// when it differs from m. A file of at most max bytes is read (to max+1
// bytes, whatever it grew to) and kept in its version. A larger one is
// never read whole: it gets a version without content, its sha256
// streamed only when it could still be m's content (the same size as a
// memory whose sha is known), else left empty.
func (b *adoption) file(e walkEntry, m *Memory, max int64) error {
	l := b.l
	op := OpCreated
	id := NewMemoryID()
	if m != nil {
		op, id = OpModified, m.ID
	}
	data, size, ok, err := readAtMost(e.Dir, e.Name, max)
	if gone(err) {
		return nil // changed from outside since the walk: the next load looks again
	}
	if err != nil {
		return err
	}
	if ok {
		if m != nil && m.SHA256 == SHA256Hex(data) {
			return nil
		}
		return b.add(l.newVer(id, op, e.Rel, data, b.actor, b.at))
	}
	sha := ""
	if m != nil && m.Size == size {
		if m.SHA256 == "" {
			return nil // adopted over the limit before, at this size
		}
		if sha, _, err = hashFile(e.Dir, e.Name, size); err != nil {
			return err
		}
		if sha == m.SHA256 {
			return nil
		}
	}
	return b.add(l.newVerMeta(id, op, e.Rel, sha, size, b.actor, b.at))
}

// add queues v, writing the record once it holds adoptBatchBytes.
func (b *adoption) add(v logVer) error {
	if b.rec == nil {
		b.rec, b.bytes = &logRec{T: "tx", Op: "adopt"}, 0
	}
	b.rec.V = append(b.rec.V, v)
	if b.bytes += len(v.Content); b.bytes >= adoptBatchBytes {
		return b.flush()
	}
	return nil
}

// flush writes and commits the queued versions.
func (b *adoption) flush() error {
	rec := b.rec
	if rec == nil || len(rec.V) == 0 {
		return nil
	}
	b.rec = nil
	rec.N = b.l.next
	b.l.next++
	off, n, err := b.l.append(rec, true)
	if err != nil {
		return err
	}
	b.l.commit(rec, off, n)
	return nil
}

// newVer makes the next version record; data nil for a deletion.
func (l *tenantLog) newVer(mem, op, path string, data []byte, a Actor, at time.Time) logVer {
	if op == OpDeleted {
		return l.newVerMeta(mem, op, path, "", 0, a, at)
	}
	v := l.newVerMeta(mem, op, path, SHA256Hex(data), int64(len(data)), a, at)
	v.Content, v.Has = data, true
	return v
}

// newVerMeta makes the next version record without content: a deletion,
// or a file over the limit (sha "" when it was not hashed).
func (l *tenantLog) newVerMeta(mem, op, path, sha string, size int64, a Actor, at time.Time) logVer {
	l.seq++
	return logVer{ID: NewVersionID(), Mem: mem, Op: op, Seq: l.seq, Path: path, SHA: sha, Size: size, Actor: a, At: at}
}

// change is a write the backend is about to make.
type change struct {
	op       string // create, update, delete, rename
	p, to    Path
	old, new []byte // create, update
}

// under returns the live memories at rel or below it ("" = all), by path.
func (l *tenantLog) under(rel string) []*Memory {
	var out []*Memory
	for path, m := range l.live {
		if rel == "" || path == rel || strings.HasPrefix(path, rel+"/") {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// intent builds ch's record, or nil when it changes no memory. It checks
// sc.Expect against the memory at the written path.
func (l *tenantLog) intent(tr *os.Root, sc Scope, ch change) (*logRec, error) {
	now := time.Now().UTC()
	rec := &logRec{T: "tx", Op: ch.op, Path: ch.p.Rel()}
	if ch.op == "update" && bytes.Equal(ch.old, ch.new) {
		return nil, nil // a write that changes nothing adds no version (and meets any precondition)
	}
	at := l.live[ch.p.Rel()]
	id, sha := "", ""
	if at != nil {
		id, sha = at.ID, at.SHA256
	}
	if err := checkExpect(sc, id, sha); err != nil {
		return nil, err
	}
	switch ch.op {
	case "create":
		rec.V = append(rec.V, l.newVer(NewMemoryID(), OpCreated, ch.p.Rel(), ch.new, sc.Actor, now))
	case "update":
		if at == nil {
			rec.V = append(rec.V, l.newVer(NewMemoryID(), OpCreated, ch.p.Rel(), ch.new, sc.Actor, now))
		} else {
			rec.V = append(rec.V, l.newVer(at.ID, OpModified, ch.p.Rel(), ch.new, sc.Actor, now))
		}
	case "delete":
		for _, m := range l.under(ch.p.Rel()) {
			rec.V = append(rec.V, l.newVer(m.ID, OpDeleted, m.Path, nil, sc.Actor, now))
		}
	case "rename":
		rec.To = ch.to.Rel()
		max := sc.Limits.OrDefaults().MaxFileBytes
		for _, m := range l.under(ch.p.Rel()) {
			dst := rec.To + m.Path[len(rec.Path):]
			// A rename keeps the content: a file over the limit keeps its
			// sha and size, and is not read.
			data, _, ok, err := readAtMost(tr, m.Path, max)
			switch {
			case err != nil:
				return nil, err
			case ok:
				rec.V = append(rec.V, l.newVer(m.ID, OpModified, dst, data, sc.Actor, now))
			default:
				rec.V = append(rec.V, l.newVerMeta(m.ID, OpModified, dst, m.SHA256, m.Size, sc.Actor, now))
			}
		}
	}
	if len(rec.V) == 0 {
		return nil, nil
	}
	rec.N = l.next
	l.next++
	return rec, nil
}

// do runs a backend write fn with its versions: intent (synced), fn,
// commit, or settle when fn failed. Call with the tenant's lock held.
func (h *fileHistory) do(ctx context.Context, tr *os.Root, sc Scope, ch change, fn func() error) error {
	l, err := h.load(ctx, tr, sc.Tenant, sc.Limits)
	if err != nil {
		return err
	}
	rec, err := l.intent(tr, sc, ch)
	if err != nil {
		return err
	}
	if rec == nil {
		return fn()
	}
	off, n, err := l.append(rec, true)
	if err != nil {
		return fmt.Errorf("memory history: %w", err)
	}
	crashHook("intent")
	ferr := fn()
	crashHook("applied")
	if ferr == nil {
		l.commit(rec, off, n)
		crashHook("committed")
		return nil
	}
	done, err := happened(tr, rec)
	if err != nil {
		// The path cannot be read now: a link was swapped in on the way
		// (by someone outside the tool), which is also what refused the
		// write before it changed anything.
		done = false
	}
	if err := l.decide(rec, off, n, done); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// content reads a version's content from the log.
func (l *tenantLog) content(fv *fver) ([]byte, bool, error) {
	buf := make([]byte, fv.n)
	if _, err := l.f.ReadAt(buf, fv.off); err != nil {
		return nil, false, err
	}
	var rec logRec
	if err := json.Unmarshal(buf, &rec); err != nil || fv.i >= len(rec.V) {
		return nil, false, fmt.Errorf("memory history: unreadable record at byte %d", fv.off)
	}
	v := rec.V[fv.i]
	return v.Content, v.Has, nil
}

// rewrite replaces the log by the kept versions (with edit applied to
// each), atomically, and rebuilds the index.
func (h *fileHistory) rewrite(tenant string, l *tenantLog, keep func(*fver) bool, edit func(*logVer)) error {
	tmp := logName(tenant) + ".tmp"
	f, err := h.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer h.root.Remove(tmp) //nolint:errcheck // gone after the rename
	w := bufio.NewWriter(f)
	var n int64
	// Versions of one record are in a row: each record is read once.
	var rec logRec
	recOff := int64(-1)
	for _, fv := range l.vers {
		if !keep(fv) {
			continue
		}
		if fv.off != recOff {
			rec = logRec{}
			buf := make([]byte, fv.n)
			if _, err := l.f.ReadAt(buf, fv.off); err != nil {
				f.Close()
				return err
			}
			if err := json.Unmarshal(buf, &rec); err != nil {
				f.Close()
				return err
			}
			recOff = fv.off
		}
		v := rec.V[fv.i]
		if edit != nil {
			edit(&v)
		}
		line, _ := json.Marshal(&logRec{T: "tx", N: n, Op: "kept", V: []logVer{v}})
		c, _ := json.Marshal(&logRec{T: "c", N: n})
		w.Write(line)
		w.WriteByte('\n')
		w.Write(c)
		w.WriteByte('\n')
		n++
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := h.root.Rename(tmp, logName(tenant)); err != nil {
		return err
	}
	if d, err := h.root.Open("."); err == nil {
		d.Sync()
		d.Close()
	}
	fresh, _, err := h.read(tenant)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f, l.next, l.seq, l.vers, l.byID, l.mems, l.live = fresh.f, fresh.next, max(l.seq, fresh.seq), fresh.vers, fresh.byID, fresh.mems, fresh.live
	l.mu.Unlock()
	old.Close()
	return nil
}
