package core

import (
	"context"
	"strings"
	"sync"
	"time"
)

// NewMemory returns a Client whose leases live in this process: the same
// semantics as NewRedis — tokens, fences, TTLs, renewal, notifications,
// re-entry — for tests and single-process programs. Fences start at 1.
func NewMemory(opts ...Option) *Client {
	c := newClient(opts)
	m := &memoryBackend{leases: make(map[string]memLease), fences: make(map[string]int64)}
	c.setBackend(m, 0)
	m.nt = c.nt
	return c
}

type memLease struct {
	value   string
	expires time.Time
}

// memoryBackend keeps leases in maps. Fence counters are kept for the
// life of the Client.
type memoryBackend struct {
	nt *notifier

	mu     sync.Mutex
	leases map[string]memLease
	fences map[string]int64
	ops    int
}

func owns(value, token string) bool {
	return value == token || strings.HasPrefix(value, token+"|")
}

// live returns the unexpired lease of key. Called with m.mu held.
func (m *memoryBackend) live(key string, now time.Time) (memLease, bool) {
	ml, ok := m.leases[key]
	if ok && !now.Before(ml.expires) {
		delete(m.leases, key)
		return memLease{}, false
	}
	return ml, ok
}

func (m *memoryBackend) acquire(_ context.Context, n names, token, value string, ttl time.Duration) (acquireResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.sweep(now)
	if ml, ok := m.live(n.lease, now); ok {
		if owns(ml.value, token) {
			ml.expires = now.Add(ttl)
			m.leases[n.lease] = ml
			return acquireResult{acquired: true, reentered: true, fence: m.fences[n.fence]}, nil
		}
		return acquireResult{holderTTL: ml.expires.Sub(now)}, nil
	}
	f := m.fences[n.fence] + 1
	m.fences[n.fence] = f
	m.leases[n.lease] = memLease{value: value, expires: now.Add(ttl)}
	return acquireResult{acquired: true, fence: f}, nil
}

// sweep drops expired leases now and then, so abandoned keys do not pile up.
func (m *memoryBackend) sweep(now time.Time) {
	m.ops++
	if m.ops%1024 != 0 {
		return
	}
	for k, ml := range m.leases {
		if !now.Before(ml.expires) {
			delete(m.leases, k)
		}
	}
}

func (m *memoryBackend) extend(_ context.Context, reqs []extendReq) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for i := range reqs {
		r := &reqs[i]
		if ml, ok := m.live(r.n.lease, now); ok && owns(ml.value, r.token) {
			ml.expires = now.Add(r.ttl)
			m.leases[r.n.lease] = ml
			r.ok = true
		}
	}
}

func (m *memoryBackend) release(_ context.Context, n names, token string) (bool, error) {
	m.mu.Lock()
	ml, ok := m.live(n.lease, time.Now())
	if !ok || !owns(ml.value, token) {
		m.mu.Unlock()
		return false, nil
	}
	delete(m.leases, n.lease)
	m.mu.Unlock()
	m.nt.deliver(n.lease)
	return true, nil
}

func (m *memoryBackend) inspect(_ context.Context, n names) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	info := Info{Fence: m.fences[n.fence]}
	if ml, ok := m.live(n.lease, now); ok {
		info.Held = true
		info.Token, info.Metadata, _ = strings.Cut(ml.value, "|")
		info.TTL = ml.expires.Sub(now)
	}
	return info, nil
}

func (m *memoryBackend) setRecord(_ context.Context, key, value string, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leases[key] = memLease{value: value, expires: time.Now().Add(ttl)}
	return nil
}

func (m *memoryBackend) getRecord(_ context.Context, key string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ml, ok := m.live(key, time.Now())
	return ml.value, ok, nil
}

// Notifications need no subscription in memory: they flow at once.
func (m *memoryBackend) subscribe(_ context.Context, channel string) error {
	m.nt.confirm(channel)
	return nil
}

func (m *memoryBackend) unsubscribe(...string) {}

func (m *memoryBackend) close() {}
