package httpidem

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A MemoryStore is an IdempotencyStore and a ClaimCounter in process
// memory, with the semantics of RedisStore — leases are core.NewMemory
// locks (renewed, fenced), records and claims expire — for tests and
// single-process programs. CountApprox counts exactly here.
type MemoryStore struct {
	*base
}

var (
	_ IdempotencyStore = (*MemoryStore)(nil)
	_ ClaimCounter     = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty MemoryStore. WithClock sets the clock by
// which its records and claims expire; WithLocks gives it a lock client
// (default core.NewMemory(), closed by Close). An invalid option is an
// error matching ErrInvalidConfig.
func NewMemoryStore(opts ...StoreOption) (*MemoryStore, error) {
	cfg, err := newStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	m := &memKV{now: cfg.now, entries: make(map[string]memEntry), sets: make(map[string]memSet)}
	s := &MemoryStore{&base{prefix: cfg.prefix, kv: m, locks: cfg.locks}}
	if s.locks == nil {
		if s.locks, err = core.NewMemory(core.WithKeyPrefix(cfg.prefix)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		s.ownLocks = true
	}
	return s, nil
}

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
