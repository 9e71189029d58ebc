package core

import (
	"slices"
	"time"
)

// memPermit is one permit of a semaphore in the memory backend.
type memPermit struct {
	fence   int64
	value   string
	expires time.Time
}

// permits returns the live permits of a semaphore, dropping expired ones.
// Called with m.mu held; nil when none is held.
func (m *memoryBackend) permits(n names, now time.Time) map[string]memPermit {
	ps := m.sems[n.lease]
	for t, p := range ps {
		if !now.Before(p.expires) {
			delete(ps, t)
		}
	}
	if len(ps) == 0 {
		delete(m.sems, n.lease)
		return nil
	}
	return ps
}

// semAcquire is acquire for a semaphore (see sem_acquire.lua): nobody
// overtakes the waiters that queue; fair joins the queue when not served.
// Called with m.mu held.
func (m *memoryBackend) semAcquire(n names, token, value string, ttl time.Duration, fair, enqueue bool, now time.Time) acquireResult {
	ps := m.permits(n, now)
	m.pruneQueue(n, now)
	if p, ok := ps[token]; ok { // re-entry: never shorter than it was
		if e := now.Add(ttl); e.After(p.expires) {
			p.expires = e
			ps[token] = p
		}
		m.leaveQueue(n, token)
		return acquireResult{acquired: true, fence: p.fence}
	}
	if fair && enqueue && len(ps) >= n.limit {
		m.enqueue(n, token, now)
	}
	if len(ps) < n.limit {
		free := n.limit - len(ps)
		var served bool
		if q := m.queues[n.queue]; q == nil {
			served = true
		} else if _, queued := q.due[token]; queued {
			served = slices.Contains(q.order[:min(free, len(q.order))], token)
		} else {
			served = len(q.order) < free
		}
		if !served {
			if fair && enqueue {
				m.enqueue(n, token, now)
			}
			return acquireResult{holderTTL: -1}
		}
		m.leaveQueue(n, token)
	}
	if len(ps) >= n.limit {
		first := time.Time{}
		for _, p := range ps {
			if first.IsZero() || p.expires.Before(first) {
				first = p.expires
			}
		}
		return acquireResult{holderTTL: first.Sub(now)}
	}
	if ps == nil {
		ps = make(map[string]memPermit)
		m.sems[n.lease] = ps
	}
	f := m.fences[n.fence] + 1
	m.fences[n.fence] = f
	ps[token] = memPermit{fence: f, value: value, expires: now.Add(ttl)}
	return acquireResult{acquired: true, fence: f}
}

// semExtend is one extension of a permit. Called with m.mu held.
func (m *memoryBackend) semExtend(r *extendReq, now time.Time) {
	ps := m.permits(*r.n, now)
	p, ok := ps[r.token]
	if !ok {
		r.gone = true
		return
	}
	if e := now.Add(r.ttl); e.After(p.expires) { // never shorter than it was
		p.expires = e
		ps[r.token] = p
	}
	r.ok, r.left = true, p.expires.Sub(now)
}

// semRelease gives back a permit; it reports whether token held one.
// Called with m.mu held; the caller announces the release.
func (m *memoryBackend) semRelease(n names, token string, now time.Time) bool {
	ps := m.permits(n, now)
	if _, ok := ps[token]; !ok {
		return false
	}
	delete(ps, token)
	if len(ps) == 0 {
		delete(m.sems, n.lease)
	}
	return true
}

// pruneQueue drops the waiters of n's queue whose entry deadline passed,
// wherever they are in it. Called with m.mu held.
func (m *memoryBackend) pruneQueue(n names, now time.Time) {
	q := m.queues[n.queue]
	if q == nil {
		return
	}
	q.order = slices.DeleteFunc(q.order, func(t string) bool {
		if now.After(q.due[t]) {
			delete(q.due, t)
			delete(q.since, t)
			return true
		}
		return false
	})
	if len(q.order) == 0 {
		delete(m.queues, n.queue)
	}
}
