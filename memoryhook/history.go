package memoryhook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"time"
)

// History: every successful write of a store with history (both stores)
// adds versions, in the same lock or transaction as the write itself, so a
// write never exists without its version nor a version without its write.
// The shape follows Anthropic's hosted memory stores (the memory stores reference's memory shape): a memory is a file with an id kept across renames;
// a version records one operation on it with the content as of then and the
// actor. Directories are not memories. History is never visible to the
// model and counts against no model-visible limit.

// Operations of a version.
const (
	OpCreated  = "created"
	OpModified = "modified" // content change, or a rename (the new path)
	OpDeleted  = "deleted"
)

// Actor types, as the hosted API names them where it has one.
const (
	// ActorModel: a memory tool call the proxy ran for the model (the
	// hosted api_actor, plus the request and the upstream message).
	ActorModel = "api_actor"
	// ActorOperator: an operator API or CLI call; Operator names the token.
	ActorOperator = "service_account_actor"
	// ActorSystem: the store itself, e.g. adopting files found on disk that
	// no version knew (written before history existed, or by hand).
	ActorSystem = "system_actor"
)

// Actor is who made a write; recorded with the version, never changed.
type Actor struct {
	Type      string `json:"type"`
	Tenant    string `json:"tenant,omitempty"`
	KeyID     string `json:"api_key_id,omitempty"` // first 8 hex of the key's sha256
	RequestID string `json:"request_id,omitempty"`
	MessageID string `json:"upstream_message_id,omitempty"` // the reply whose tool_use ran
	Operator  string `json:"service_account_id,omitempty"`  // the operator token's name
}

// Expect is an operator's precondition on the memory a write touches (the
// file at the written path, or the source of a rename or delete). The
// store checks it inside the write's lock or transaction, so a concurrent
// write by the model is never lost: the operator gets ErrPrecondition.
type Expect struct {
	MemoryID string // the memory at the path must have this id ("" = any)
	SHA256   string // and this content ("" = any)
}

// ErrPrecondition: Scope.Expect did not hold; nothing was written.
var ErrPrecondition = errors.New("memoryhook: precondition failed")

// ErrHeadVersion: the head version of a live memory cannot be redacted.
var ErrHeadVersion = errors.New("memoryhook: the head version of a live memory cannot be redacted")

// Memory is one live memory (a file).
type Memory struct {
	ID        string
	Path      string // Path.Rel(): "notes/a.md"
	SHA256    string
	Size      int64
	VersionID string // the head version
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Version is one recorded write.
type Version struct {
	ID         string
	MemoryID   string
	Op         string
	Path       string // Path.Rel() as of this version; "" once redacted
	Content    []byte // nil unless asked for, deleted or redacted
	HasContent bool   // Content holds the version's content (it may be empty)
	SHA256     string // "" for deleted and redacted versions
	Size       int64
	Actor      Actor
	At         time.Time
	RedactedAt time.Time // zero unless redacted
	RedactedBy *Actor
	Seq        int64 // order within the tenant; larger is newer
}

// VersionQuery filters a version listing; zero fields match everything.
// Results are newest first.
type VersionQuery struct {
	MemoryID  string
	Op        string
	RequestID string
	KeyID     string
	Operator  string
	Since     time.Time // created at or after
	Until     time.Time // created at or before
	BeforeSeq int64     // only versions older than this Seq (a page cursor); 0 = from the newest
	Limit     int       // at most this many (0 = all)
	Content   bool      // load each version's content
}

// Match reports whether v passes q's filters (not the cursor or limit).
func (q VersionQuery) Match(v *Version) bool {
	switch {
	case q.MemoryID != "" && v.MemoryID != q.MemoryID,
		q.Op != "" && v.Op != q.Op,
		q.RequestID != "" && v.Actor.RequestID != q.RequestID,
		q.KeyID != "" && v.Actor.KeyID != q.KeyID,
		q.Operator != "" && v.Actor.Operator != q.Operator,
		!q.Since.IsZero() && v.At.Before(q.Since),
		!q.Until.IsZero() && v.At.After(q.Until),
		q.BeforeSeq > 0 && v.Seq >= q.BeforeSeq:
		return false
	}
	return true
}

// Retention says which versions a tenant keeps: every version younger than
// KeepDays, and the KeepLatest newest of each memory whatever their age.
// The head version of a live memory is always kept. KeepDays 0 turns
// history off: only the heads stay.
type Retention struct {
	KeepDays   int
	KeepLatest int
}

// DefaultRetention is the policy default: 30 days, the latest 10 always.
func DefaultRetention() Retention { return Retention{KeepDays: 30, KeepLatest: 10} }

// Off reports whether history is off (only heads are kept).
func (r Retention) Off() bool { return r.KeepDays <= 0 }

// Prunable reports whether a non-head version v, the nth newest of its
// memory (0 = newest), may go at now under r.
func (r Retention) Prunable(v *Version, nth int, now time.Time) bool {
	if r.Off() {
		return true
	}
	if nth < r.KeepLatest {
		return false
	}
	return v.At.Before(now.Add(-time.Duration(r.KeepDays) * 24 * time.Hour))
}

// History is what a store with versions offers the operator API, besides
// writes, which go through the Backend with Scope.Actor and Scope.Expect.
type History interface {
	// Memories lists the tenant's live memories, ordered by path bytes.
	Memories(ctx context.Context, tenant string) ([]Memory, error)
	// MemoryByID returns a live memory; ErrNotExist if there is none.
	MemoryByID(ctx context.Context, tenant, id string) (Memory, error)
	// Versions lists versions newest first.
	Versions(ctx context.Context, tenant string, q VersionQuery) ([]Version, error)
	// Version returns one version, with its content if content is set
	// (and it has any); ErrNotExist if there is none.
	Version(ctx context.Context, tenant, id string, content bool) (Version, error)
	// Redact clears a version's content, path, sha and size, keeping its
	// actor and time; ErrHeadVersion for the head of a live memory.
	Redact(ctx context.Context, tenant, id string, by Actor) (Version, error)
	// Prune drops the versions r lets go; it returns how many.
	Prune(ctx context.Context, tenant string, r Retention, now time.Time) (int, error)
	// Purge removes every file, directory and version of the tenant; it
	// returns the files and versions removed.
	Purge(ctx context.Context, tenant string) (files, versions int, err error)
	// SubStores lists the stores named tenant~<name> (a key's own, say)
	// that have been used, sorted.
	SubStores(ctx context.Context, tenant string) ([]string, error)
}

// SubStorePrefix is what the names of tenant's sub-stores begin with.
func SubStorePrefix(tenant string) string { return tenant + "~" }

// Governed is a Store with history: what the operator API and CLI use.
type Governed interface {
	Store
	History
	// Backend is the storage under the store's commands; operator writes
	// go through it, with Scope.Actor and Scope.Expect set.
	Backend() Backend
}

// SHA256Hex is the lowercase hex SHA-256 of data, as content_sha256 is.
func SHA256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// NewMemoryID and NewVersionID make the ids the hosted API's shape uses.
func NewMemoryID() string  { return "mem_" + randomHex(12) }
func NewVersionID() string { return "memver_" + randomHex(12) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// checkExpect checks sc.Expect against the memory found at the written
// path (id and head sha, "" id when no memory is there).
func checkExpect(sc Scope, id, sha string) error {
	e := sc.Expect
	if e == nil {
		return nil
	}
	if (e.MemoryID != "" && e.MemoryID != id) || (e.SHA256 != "" && e.SHA256 != sha) {
		return ErrPrecondition
	}
	return nil
}

// CheckExpect is checkExpect for other stores' history code.
func CheckExpect(sc Scope, id, sha string) error { return checkExpect(sc, id, sha) }

// PruneSet returns the ids of vs (one tenant's versions, any order) that r
// lets go at now; heads maps each live memory's id to its head version.
// A live memory keeps its head, its KeepLatest newest versions and those
// younger than KeepDays. A deleted memory has nothing current to protect:
// its versions go by age alone, and its deletion is kept while any older
// version of it is.
func PruneSet(vs []Version, heads map[string]string, r Retention, now time.Time) []string {
	by := map[string][]*Version{}
	for i := range vs {
		by[vs[i].MemoryID] = append(by[vs[i].MemoryID], &vs[i])
	}
	var drop []string
	for mem, list := range by {
		sort.Slice(list, func(i, j int) bool { return list[i].Seq > list[j].Seq })
		head, live := heads[mem]
		kept := false
		var gone []string
		for nth, v := range list {
			switch {
			case live && v.ID == head:
				kept = true
			case live && !r.Prunable(v, nth, now),
				!live && nth > 0 && !r.Prunable(v, r.KeepLatest, now):
				kept = true
			case live || nth > 0:
				gone = append(gone, v.ID)
			}
		}
		if !live && !kept && (r.Off() || r.Prunable(list[0], r.KeepLatest, now)) {
			gone = append(gone, list[0].ID)
		}
		drop = append(drop, gone...)
	}
	sort.Strings(drop)
	return drop
}
