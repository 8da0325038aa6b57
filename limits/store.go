package limits

import (
	"context"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// Counter is one spend counter a request is checked and charged against: the tenant's (User "")
// or one end user's, in one period bucket, with the cap that applies to it.
type Counter struct {
	User   string // "" for the tenant as a whole
	Bucket string // see Bucket
	Cap    tokens.Money
}

// Reservation is the outcome of SpendStore.Reserve.
type Reservation struct {
	// Spent and Reserved are each counter's settled spend and unexpired reservations (other
	// requests' holds) as they were when checked.
	Spent, Reserved []tokens.Money
	// Refused is the index of the first counter the amount does not fit under, -1 when it fits
	// under all of them (and is then held on each).
	Refused int
}

// SpendStore keeps spend counters and reservations. Implementations are exact under
// concurrency: a Reserve sees every Reserve and Settle that returned before it started.
// Counters of one call are passed sorted by (User, Bucket), so stores that lock rows in that
// order cannot deadlock.
type SpendStore interface {
	// Reserve checks that spent + unexpired reservations + amount stays within Cap on every
	// counter of tenant and, if so, holds amount on each under id until ttl passes.
	Reserve(ctx context.Context, id, tenant string, cs []Counter, amount tokens.Money, ttl time.Duration) (Reservation, error)
	// Settle drops the hold of id and adds cost to every counter.
	Settle(ctx context.Context, id, tenant string, cs []Counter, cost tokens.Money) error
	// Release drops the hold of id without charging anything.
	Release(ctx context.Context, id string) error
	// Spent reads the settled spend of each counter (0 for one never charged).
	Spent(ctx context.Context, tenant string, cs []Counter) ([]tokens.Money, error)
	// UserSpend reads the settled spend of every end user of tenant in bucket, for reports.
	UserSpend(ctx context.Context, tenant, bucket string) (map[string]tokens.Money, error)
	// Name says what the store is, for logs and the README's "which store" question.
	Name() string
	BatchStore
}

// MemoryStore is a SpendStore of one process: exact for that process, not shared between
// replicas.
type MemoryStore struct {
	mu       sync.Mutex
	now      func() time.Time
	spent    map[counterKey]tokens.Money
	holds    map[counterKey]map[string]hold // by request id
	holdKeys map[string][]counterKey        // the counters each request id holds
	batches  map[string]*batchRecord
}

type batchRecord struct {
	b       Batch
	expires time.Time
	closed  bool
}

type counterKey struct{ tenant, user, bucket string }

type hold struct {
	amount  tokens.Money
	expires time.Time
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{now: time.Now, spent: map[counterKey]tokens.Money{},
		holds: map[counterKey]map[string]hold{}, holdKeys: map[string][]counterKey{}, batches: map[string]*batchRecord{}}
}

func (m *MemoryStore) OpenBatch(_ context.Context, b Batch, holdTTL, recordTTL time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for id, r := range m.batches {
		if !now.Before(r.expires) {
			delete(m.batches, id)
		}
	}
	if _, ok := m.batches[b.ID]; !ok {
		m.batches[b.ID] = &batchRecord{b: b, expires: now.Add(recordTTL)}
	}
	for _, k := range m.holdKeys[b.HoldID] {
		if h, ok := m.holds[k][b.HoldID]; ok {
			h.expires = now.Add(holdTTL)
			m.holds[k][b.HoldID] = h
		}
	}
	return nil
}

func (m *MemoryStore) CloseBatch(_ context.Context, id, tenant string) (Batch, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.batches[id]
	if r == nil || r.closed || r.b.Tenant != tenant || !m.now().Before(r.expires) {
		return Batch{}, false, nil
	}
	r.closed = true
	return r.b, true, nil
}

func (m *MemoryStore) Name() string { return "memory" }

func (m *MemoryStore) Reserve(_ context.Context, id, tenant string, cs []Counter, amount tokens.Money, ttl time.Duration) (Reservation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	sums := make([]tokens.Money, 2*len(cs))
	r := Reservation{Spent: sums[:len(cs):len(cs)], Reserved: sums[len(cs):], Refused: -1}
	for i, c := range cs {
		k := counterKey{tenant, c.User, c.Bucket}
		r.Spent[i] = m.spent[k]
		for hid, h := range m.holds[k] {
			if !now.Before(h.expires) {
				delete(m.holds[k], hid) // a hold left by a request that never settled
				continue
			}
			r.Reserved[i] = r.Reserved[i].Plus(h.amount)
		}
		if r.Refused < 0 && r.Spent[i].Plus(r.Reserved[i]).Plus(amount) > c.Cap {
			r.Refused = i
		}
	}
	if r.Refused >= 0 {
		return r, nil
	}
	keys := make([]counterKey, 0, len(cs))
	for _, c := range cs {
		k := counterKey{tenant, c.User, c.Bucket}
		hs := m.holds[k]
		if hs == nil {
			hs = map[string]hold{}
			m.holds[k] = hs
		}
		hs[id] = hold{amount: amount, expires: now.Add(ttl)}
		keys = append(keys, k)
	}
	if prev := m.holdKeys[id]; prev != nil { // a batch's hold, reserved again
		keys = append(prev, keys...)
	}
	m.holdKeys[id] = keys
	return r, nil
}

func (m *MemoryStore) Settle(_ context.Context, id, tenant string, cs []Counter, cost tokens.Money) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release(id)
	for _, c := range cs {
		k := counterKey{tenant, c.User, c.Bucket}
		m.spent[k] = m.spent[k].Plus(cost)
	}
	return nil
}

func (m *MemoryStore) Release(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release(id)
	return nil
}

func (m *MemoryStore) release(id string) {
	for _, k := range m.holdKeys[id] {
		// An empty map stays for the counter's next hold (a map made and dropped per request
		// was most of what a hold allocated); the counter's spend stays too.
		delete(m.holds[k], id)
	}
	delete(m.holdKeys, id)
}

func (m *MemoryStore) UserSpend(_ context.Context, tenant, bucket string) (map[string]tokens.Money, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]tokens.Money{}
	for k, v := range m.spent {
		if k.tenant == tenant && k.bucket == bucket && k.user != "" {
			out[k.user] = v
		}
	}
	return out, nil
}

func (m *MemoryStore) Spent(_ context.Context, tenant string, cs []Counter) ([]tokens.Money, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]tokens.Money, len(cs))
	for i, c := range cs {
		out[i] = m.spent[counterKey{tenant, c.User, c.Bucket}]
	}
	return out, nil
}
