package core

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NewMemory returns a Client whose leases live in this process: the same
// semantics as NewRedis — tokens, fences, TTLs, renewal, notifications,
// re-entry — for tests and single-process programs. Fences start at 1.
// The error is ErrInvalidOption (or ErrInvalidTTL) saying which option is
// wrong.
func NewMemory(opts ...Option) (*Client, error) {
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	m := &memoryBackend{leases: make(map[string]memLease), fences: make(map[string]int64),
		queues: make(map[string]*memQueue), sems: make(map[string]map[string]memPermit),
	}
	c.setBackend(m, 0, CapFair|CapNotify|CapList|CapClaims|CapPrimitives)
	m.nt = c.nt
	return c, nil
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
	queues map[string]*memQueue            // fair waiters, by names.queue
	sems   map[string]map[string]memPermit // semaphore permits (and readers) by names.lease, then token
	ops    int
}

// memQueue is a fair queue: tokens in arrival order and their deadlines.
type memQueue struct {
	order []string
	due   map[string]time.Time
	since map[string]time.Time // when each joined
}

// age is how long the queue's first waiter has waited.
func (q *memQueue) age(now time.Time) time.Duration {
	if q == nil || len(q.order) == 0 {
		return 0
	}
	return now.Sub(q.since[q.order[0]])
}

// queue returns the live queue of n, dropping expired heads. Called with
// m.mu held; nil when nobody queues.
func (m *memoryBackend) queue(n names, now time.Time) *memQueue {
	q := m.queues[n.queue]
	if q == nil {
		return nil
	}
	for len(q.order) > 0 {
		head := q.order[0]
		if d, ok := q.due[head]; ok && !now.After(d) {
			break
		}
		q.order = q.order[1:]
		delete(q.due, head)
		delete(q.since, head)
	}
	if len(q.order) == 0 {
		delete(m.queues, n.queue)
		return nil
	}
	return q
}

func (m *memoryBackend) enqueue(n names, token string, now time.Time) {
	q := m.queues[n.queue]
	if q == nil {
		q = &memQueue{due: make(map[string]time.Time), since: make(map[string]time.Time)}
		m.queues[n.queue] = q
	}
	if _, ok := q.due[token]; !ok {
		q.order = append(q.order, token)
		q.since[token] = now
	}
	q.due[token] = now.Add(fairEntryTTL)
}

// leaveQueue removes token from n's queue; it reports whether it was there.
func (m *memoryBackend) leaveQueue(n names, token string) bool {
	q := m.queues[n.queue]
	if q == nil {
		return false
	}
	if _, ok := q.due[token]; !ok {
		return false
	}
	delete(q.due, token)
	delete(q.since, token)
	for i, t := range q.order {
		if t == token {
			q.order = append(q.order[:i:i], q.order[i+1:]...)
			break
		}
	}
	if len(q.order) == 0 {
		delete(m.queues, n.queue)
	}
	return true
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

func (m *memoryBackend) acquire(_ context.Context, n names, token, value string, ttl time.Duration, fair, enqueue bool) (acquireResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.sweep(now)
	if n.limit > 0 {
		return m.semAcquire(n, token, value, ttl, fair, enqueue, now), nil
	}
	if n.rw() {
		return m.rwAcquire(n, token, value, ttl, enqueue, now), nil
	}
	var q *memQueue
	if fair {
		q = m.queue(n, now)
	}
	if ml, ok := m.live(n.lease, now); ok {
		if owns(ml.value, token) { // re-entry, or the claim of a fair grant
			if fair || ml.value == token+"|" {
				// A grant is claimed by any acquisition under its token,
				// fair or not, as in acquire.lua: leave tells a grant
				// still to be claimed by its value (review 12).
				ml.value = value
			}
			if fair {
				m.leaveQueue(n, token)
			}
			if e := now.Add(ttl); e.After(ml.expires) { // never shorter than it was
				ml.expires = e
			}
			m.leases[n.lease] = ml
			return acquireResult{acquired: true, fence: m.fences[n.fence]}, nil
		}
		if fair && enqueue {
			m.enqueue(n, token, now)
		}
		if !fair && enqueue && m.queue(n, now) != nil { // waiters queue: join them
			m.enqueue(n, token, now)
			return acquireResult{holderTTL: ml.expires.Sub(now), queued: true}, nil
		}
		return acquireResult{holderTTL: ml.expires.Sub(now)}, nil
	}
	if q != nil {
		if q.order[0] != token { // free, but an earlier waiter comes first
			if enqueue {
				m.enqueue(n, token, now)
			}
			return acquireResult{holderTTL: -1}, nil
		}
		m.leaveQueue(n, token)
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
	for k := range m.sems {
		m.permits(names{lease: k}, now)
	}
}

func (m *memoryBackend) extend(_ context.Context, reqs []extendReq) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for i := range reqs {
		r := &reqs[i]
		if r.n.limit > 0 {
			m.semExtend(r, now)
			continue
		}
		if r.n.limit == rwRead {
			rr, rn := *r, readerNames(*r.n)
			rr.n = &rn
			m.semExtend(&rr, now)
			r.ok, r.gone, r.left = rr.ok, rr.gone, rr.left
			continue
		}
		ml, ok := m.live(r.n.lease, now)
		switch {
		case !ok:
			r.gone = true
		case owns(ml.value, r.token):
			if e := now.Add(r.ttl); e.After(ml.expires) { // never shorter than it was
				ml.expires = e
			}
			m.leases[r.n.lease] = ml
			r.ok, r.left = true, ml.expires.Sub(now)
		}
	}
}

func (m *memoryBackend) release(_ context.Context, n names, token string) (bool, error) {
	m.mu.Lock()
	now := time.Now()
	if n.limit > 0 || n.rw() {
		var ok bool
		payload := ""
		if n.limit > 0 {
			ok = m.semRelease(n, token, now)
			if ok || m.leaveQueue(n, token) {
				payload = "r:"
			}
		} else {
			ok, payload = m.rwRelease(n, token, now)
		}
		m.mu.Unlock()
		if payload != "" {
			m.nt.deliver(n.lease, payload)
		}
		return ok, nil
	}
	ml, ok := m.live(n.lease, now)
	if !ok || !owns(ml.value, token) {
		m.leaveQueue(n, token)
		m.mu.Unlock()
		return false, nil
	}
	payload := m.vacate(n, now)
	m.mu.Unlock()
	m.nt.deliver(n.lease, payload)
	return true, nil
}

// vacate deletes n's lease and grants the key to the first fair waiter,
// if any; it returns the notification to send. Called with m.mu held.
func (m *memoryBackend) vacate(n names, now time.Time) string {
	delete(m.leases, n.lease)
	q := m.queue(n, now)
	if q == nil {
		return "r:"
	}
	head := q.order[0]
	m.leaveQueue(n, head)
	m.fences[n.fence]++
	m.leases[n.lease] = memLease{value: head + "|", expires: now.Add(fairClaim)} // a grant (see release.lua)
	return grantPrefix + head
}

func (m *memoryBackend) canLeave(names) bool { return true }

// leave takes token out of n's queue (see queueLeaver); a grant to token
// not claimed yet is passed on, a lease, hold or permit of the token
// stays.
func (m *memoryBackend) leave(_ context.Context, n names, token string) error {
	m.mu.Lock()
	now := time.Now()
	waited := m.leaveQueue(n, token)
	payload := ""
	switch {
	case n.limit > 0:
		if waited { // those behind it may be served now
			payload = "r:"
		}
	case n.rw():
		if waited {
			payload = "r:"
			if m.writersWaiting(n, now) {
				payload = grantPrefix + m.queues[n.queue].order[0]
			}
		}
	default:
		if ml, ok := m.live(n.lease, now); ok && ml.value == token+"|" { // its grant
			payload = m.vacate(n, now)
		}
	}
	m.mu.Unlock()
	if payload != "" {
		m.nt.deliver(n.lease, payload)
	}
	return nil
}

func (m *memoryBackend) inspect(_ context.Context, n names) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	info := Info{Fence: m.fences[n.fence]}
	if ml, ok := m.live(n.lease, now); ok {
		info.Held = true
		info.parseValue(ml.value)
		info.TTL = ml.expires.Sub(now)
	}
	if q := m.queue(n, now); q != nil {
		info.Waiters = len(q.order)
		info.OldestWait = q.age(now)
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

func (m *memoryBackend) claimRecord(_ context.Context, key, value string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if _, ok := m.live(key, now); ok {
		return false, nil
	}
	m.leases[key] = memLease{value: value, expires: now.Add(ttl)}
	return true, nil
}

func (m *memoryBackend) claimRecordWithin(_ context.Context, key, value string, ttl time.Duration, plannedMs, windowMs int64) (verdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if _, ok := m.live(key, now); ok {
		return verdictTaken, nil
	}
	dl := plannedMs + windowMs
	if now.UnixMilli() > dl {
		return verdictLate, nil
	}
	m.leases[key] = memLease{value: value, expires: now.Add(claimLife(now.UnixMilli(), dl, ttl))}
	return verdictClaimed, nil
}

func (m *memoryBackend) setRecordNewer(_ context.Context, key, ordKey, value string, order int64, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if cur, ok := m.live(ordKey, now); ok {
		if o, err := strconv.ParseInt(cur.value, 10, 64); err == nil && o > order {
			return false, nil
		}
	}
	exp := now.Add(ttl)
	m.leases[key] = memLease{value: value, expires: exp}
	m.leases[ordKey] = memLease{value: strconv.FormatInt(order, 10), expires: exp}
	return true, nil
}

// Notifications need no subscription in memory: they flow at once.
func (m *memoryBackend) subscribe(_ context.Context, channel string) error {
	m.nt.confirm(channel)
	return nil
}

func (m *memoryBackend) unsubscribe(...string) {}

func (m *memoryBackend) announce(_ context.Context, channel, payload string) error {
	m.nt.deliver(channel, payload)
	return nil
}

func (m *memoryBackend) close() {}

// acquireAll takes every mutex lease of ns, all or none, under one lock.
func (m *memoryBackend) canAcquireAll([]names) bool { return true }

func (m *memoryBackend) acquireAll(_ context.Context, ns []names, values []string, ttl time.Duration) (allResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.sweep(now)
	for i, n := range ns {
		if ml, ok := m.live(n.lease, now); ok {
			return allResult{held: i, holderTTL: ml.expires.Sub(now)}, nil
		}
	}
	r := allResult{held: -1, fences: make([]int64, len(ns))}
	for i, n := range ns {
		f := m.fences[n.fence] + 1
		m.fences[n.fence] = f
		m.leases[n.lease] = memLease{value: values[i], expires: now.Add(ttl)}
		r.fences[i] = f
	}
	return r, nil
}
