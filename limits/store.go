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
	counters map[counterKey]*memCounter
	holdKeys map[string][]*memCounter // the counters each request id holds
	batches  map[string]*batchRecord
}

// memCounter is one spend counter: its settled spend and its holds. A hold's counters are
// found from its id without hashing their keys again (an admission and its settle were
// twenty-eight map operations with two maps a counter).
type memCounter struct {
	key     counterKey
	spent   tokens.Money
	settled bool            // charged at least once (UserSpend lists it)
	holds   map[string]hold // by request id; kept when empty, for the counter's next hold
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
	return &MemoryStore{now: time.Now, counters: map[counterKey]*memCounter{}, holdKeys: map[string][]*memCounter{},
		batches: map[string]*batchRecord{}}
}

// counter is c's counter of tenant, made when it has none.
func (m *MemoryStore) counter(tenant string, c *Counter) *memCounter {
	k := counterKey{tenant, c.User, c.Bucket}
	mc := m.counters[k]
	if mc == nil {
		mc = &memCounter{key: k, holds: map[string]hold{}}
		m.counters[k] = mc
	}
	return mc
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
	for _, mc := range m.holdKeys[b.HoldID] {
		if h, ok := mc.holds[b.HoldID]; ok {
			h.expires = now.Add(holdTTL)
			mc.holds[b.HoldID] = h
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
	held, sums := reserveBufs(len(cs))
	r := Reservation{Spent: sums[:len(cs):len(cs)], Reserved: sums[len(cs):], Refused: -1}
	for i := range cs {
		mc := m.counter(tenant, &cs[i])
		held[i] = mc
		r.Spent[i] = mc.spent
		for hid, h := range mc.holds {
			if !now.Before(h.expires) {
				delete(mc.holds, hid) // a hold left by a request that never settled
				continue
			}
			r.Reserved[i] = r.Reserved[i].Plus(h.amount)
		}
		if r.Refused < 0 && r.Spent[i].Plus(r.Reserved[i]).Plus(amount) > cs[i].Cap {
			r.Refused = i
		}
	}
	if r.Refused >= 0 {
		return r, nil
	}
	for _, mc := range held {
		mc.holds[id] = hold{amount: amount, expires: now.Add(ttl)}
	}
	if prev := m.holdKeys[id]; prev != nil { // a batch's hold, reserved again
		held = append(prev, held...)
	}
	m.holdKeys[id] = held
	return r, nil
}

// smallReservation is a reservation's counters and sums for a policy's few caps, in one
// allocation: the counters stay in holdKeys until the settle, the sums go to the caller.
type smallReservation struct {
	held [4]*memCounter
	sums [8]tokens.Money
}

// reserveBufs is where a reservation of n counters keeps them and their sums (spent, then
// reserved).
func reserveBufs(n int) ([]*memCounter, []tokens.Money) {
	if n > len(smallReservation{}.held) {
		return make([]*memCounter, n), make([]tokens.Money, 2*n)
	}
	b := &smallReservation{}
	return b.held[:n:n], b.sums[: 2*n : 2*n]
}

func (m *MemoryStore) Settle(_ context.Context, id, tenant string, cs []Counter, cost tokens.Money) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.holdKeys[id]
	m.release(id)
	for i := range cs {
		mc := m.heldCounter(held, i, tenant, &cs[i])
		mc.spent, mc.settled = mc.spent.Plus(cost), true
	}
	return nil
}

// heldCounter is c's counter of tenant, the i'th of a hold's counters held when it is that one
// (a request settles the counters it reserved, in their order): found without hashing its key.
func (m *MemoryStore) heldCounter(held []*memCounter, i int, tenant string, c *Counter) *memCounter {
	if i < len(held) && held[i].key == (counterKey{tenant, c.User, c.Bucket}) {
		return held[i]
	}
	return m.counter(tenant, c)
}

func (m *MemoryStore) Release(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release(id)
	return nil
}

func (m *MemoryStore) release(id string) {
	for _, mc := range m.holdKeys[id] {
		delete(mc.holds, id)
	}
	delete(m.holdKeys, id)
}

func (m *MemoryStore) UserSpend(_ context.Context, tenant, bucket string) (map[string]tokens.Money, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]tokens.Money{}
	for k, mc := range m.counters {
		if k.tenant == tenant && k.bucket == bucket && k.user != "" && mc.settled {
			out[k.user] = mc.spent
		}
	}
	return out, nil
}

func (m *MemoryStore) Spent(_ context.Context, tenant string, cs []Counter) ([]tokens.Money, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]tokens.Money, len(cs))
	for i, c := range cs {
		if mc := m.counters[counterKey{tenant, c.User, c.Bucket}]; mc != nil {
			out[i] = mc.spent
		}
	}
	return out, nil
}
