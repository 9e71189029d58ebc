package httpidem

import (
	"context"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A MemoryStore is a Store in process memory, with the semantics of
// RedisStore — leases are core.NewMemory locks (renewed, fenced), records
// and claims expire — for tests and single-process programs. CountApprox
// counts exactly here.
type MemoryStore struct {
	b base
	m *memKV
}

// NewMemoryStore returns an empty MemoryStore. WithClock sets the clock by
// which its records and claims expire; WithLocks gives it a lock client
// (default core.NewMemory(), closed by Close).
func NewMemoryStore(opts ...StoreOption) *MemoryStore {
	cfg := newStoreConfig(opts)
	m := &memKV{now: cfg.now, entries: make(map[string]memEntry), sets: make(map[string]memSet)}
	s := &MemoryStore{b: base{prefix: cfg.prefix, err: cfg.err, kv: m}, m: m}
	if s.b.err != nil {
		return s
	}
	s.b.locks = cfg.locks
	if s.b.locks == nil {
		s.b.locks = core.NewMemory(core.WithKeyPrefix(cfg.prefix))
		s.b.ownLocks = true
	}
	return s
}

// Err returns the configuration error every call fails with, or nil.
func (s *MemoryStore) Err() error { return s.b.err }

// Begin implements Store.
func (s *MemoryStore) Begin(ctx context.Context, a BeginArgs) (Begun, error) {
	return s.b.begin(ctx, a)
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, a ClaimArgs) (bool, error) { return s.b.claim(ctx, a) }

// Unclaim implements Store.
func (s *MemoryStore) Unclaim(ctx context.Context, a ClaimArgs) error { return s.b.unclaim(ctx, a) }

// Count implements Store.
func (s *MemoryStore) Count(ctx context.Context, scope, object string, day Day) (int64, error) {
	return s.b.count(ctx, scope, object, day)
}

// Close closes the lock client the store created. Calling it again does
// nothing.
func (s *MemoryStore) Close() error { return s.b.close() }

type memEntry struct {
	data    []byte
	n       int64
	expires time.Time
}

type memSet struct {
	members map[string]struct{}
	expires time.Time
}

// memKV keeps entries in maps, expiring them by its clock.
type memKV struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[string]memEntry
	sets    map[string]memSet
	ops     int
}

// live returns the unexpired entry of key. Called with mu held.
func (m *memKV) live(key string, now time.Time) (memEntry, bool) {
	e, ok := m.entries[key]
	if ok && !now.Before(e.expires) {
		delete(m.entries, key)
		return memEntry{}, false
	}
	return e, ok
}

// tick sweeps expired entries every 1024 operations. Called with mu held.
func (m *memKV) tick(now time.Time) {
	if m.ops++; m.ops%1024 == 0 {
		m.sweep(now)
	}
}

func (m *memKV) sweep(now time.Time) {
	for k, e := range m.entries {
		if !now.Before(e.expires) {
			delete(m.entries, k)
		}
	}
	for k, s := range m.sets {
		if !now.Before(s.expires) {
			delete(m.sets, k)
		}
	}
}

func (m *memKV) get(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(key, m.now())
	return append([]byte(nil), e.data...), ok, nil
}

func (m *memKV) put(_ context.Context, key string, fence int64, data []byte, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.tick(now)
	if e, ok := m.live(key, now); ok && recordFence(e.data) > fence {
		return false, nil
	}
	m.entries[key] = memEntry{data: append([]byte(nil), data...), expires: now.Add(ttl)}
	return true, nil
}

func (m *memKV) claim(_ context.Context, k claimKeys, token, subject string, at time.Time, mode CountMode) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.tick(now)
	if mode == CountApprox {
		s, ok := m.sets[k.hll]
		if !ok || !now.Before(s.expires) {
			s = memSet{members: make(map[string]struct{})}
		}
		_, seen := s.members[subject]
		s.members[subject] = struct{}{}
		s.expires = at
		m.sets[k.hll] = s
		return !seen, nil
	}
	if _, ok := m.live(k.claim, now); ok {
		return false, nil
	}
	m.entries[k.claim] = memEntry{data: []byte(token), expires: at}
	if mode == CountExact {
		c, _ := m.live(k.counter, now)
		c.n++
		c.expires = at
		m.entries[k.counter] = c
	}
	return true, nil
}

func (m *memKV) unclaim(_ context.Context, k claimKeys, token string, counted bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.live(k.claim, now); !ok || string(e.data) != token {
		return nil
	}
	delete(m.entries, k.claim)
	if c, ok := m.live(k.counter, now); ok && counted {
		c.n--
		m.entries[k.counter] = c
	}
	return nil
}

func (m *memKV) count(_ context.Context, k claimKeys) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if c, ok := m.live(k.counter, now); ok {
		return c.n, nil
	}
	if s, ok := m.sets[k.hll]; ok && now.Before(s.expires) {
		return int64(len(s.members)), nil
	}
	return 0, nil
}
