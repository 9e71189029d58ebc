package core

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// readerNames are the names the semaphore helpers use for a read-write
// lock's readers.
func readerNames(n names) names { return names{lease: n.readers} }

// writersWaiting drops expired writer entries and reports whether a writer
// waits. Waiting writers queue in n.queue, in arrival order. Called with
// m.mu held.
func (m *memoryBackend) writersWaiting(n names, now time.Time) bool {
	m.pruneQueue(n, now)
	return m.queues[n.queue] != nil
}

// rwAcquire is acquire for a read-write lock's hold. Called with m.mu held.
func (m *memoryBackend) rwAcquire(n names, token, value string, ttl time.Duration, join bool, now time.Time) acquireResult {
	rn := readerNames(n)
	readers := m.permits(rn, now)
	waiting := m.writersWaiting(n, now)
	ml, writer := m.live(n.lease, now)
	if n.limit == rwRead {
		if p, ok := readers[token]; ok {
			if e := now.Add(ttl); e.After(p.expires) {
				p.expires = e
				readers[token] = p
			}
			return acquireResult{acquired: true, fence: p.fence}
		}
		switch {
		case writer:
			return acquireResult{holderTTL: ml.expires.Sub(now)}
		case waiting:
			return acquireResult{holderTTL: -1}
		}
		if readers == nil {
			readers = make(map[string]memPermit)
			m.sems[rn.lease] = readers
		}
		f := m.fences[n.fence]
		if len(readers) == 0 { // a new read term raises the fence
			f++
			m.fences[n.fence] = f
		}
		readers[token] = memPermit{fence: f, value: value, expires: now.Add(ttl)}
		return acquireResult{acquired: true, fence: f}
	}
	if writer {
		if owns(ml.value, token) {
			if e := now.Add(ttl); e.After(ml.expires) {
				ml.expires = e
				m.leases[n.lease] = ml
			}
			return acquireResult{acquired: true, fence: m.fences[n.fence]}
		}
		if join {
			m.enqueue(n, token, now)
		}
		return acquireResult{holderTTL: ml.expires.Sub(now)}
	}
	if len(readers) > 0 {
		if join {
			m.enqueue(n, token, now)
		}
		first := time.Time{}
		for _, p := range readers {
			if first.IsZero() || p.expires.Before(first) {
				first = p.expires
			}
		}
		return acquireResult{holderTTL: first.Sub(now)}
	}
	if q := m.queues[n.queue]; q != nil && q.order[0] != token { // an earlier writer first
		if join {
			m.enqueue(n, token, now)
		}
		return acquireResult{holderTTL: -1}
	}
	m.leaveQueue(n, token)
	f := m.fences[n.fence] + 1
	m.fences[n.fence] = f
	m.leases[n.lease] = memLease{value: value, expires: now.Add(ttl)}
	return acquireResult{acquired: true, fence: f}
}

// rwRelease gives back a hold, or takes a writer that gives up out of the
// waiting writers; it reports whether token held the hold, and the
// notification to send ("" none): a grant naming the earliest waiting
// writer, else a release. Called with m.mu held; the caller sends it.
func (m *memoryBackend) rwRelease(n names, token string, now time.Time) (bool, string) {
	waited := m.leaveQueue(n, token)
	var ok bool
	if n.limit == rwRead {
		ok = m.semRelease(readerNames(n), token, now)
	} else if ml, live := m.live(n.lease, now); live && owns(ml.value, token) {
		delete(m.leases, n.lease)
		ok = true
	}
	if !ok && !waited {
		return false, ""
	}
	if m.writersWaiting(n, now) {
		return ok, grantPrefix + m.queues[n.queue].order[0]
	}
	return ok, "r:"
}

func (m *memoryBackend) holds(_ context.Context, sem, rw names) (holdsInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var hs []Hold
	add := func(kind Kind, ps map[string]memPermit) {
		start := len(hs)
		for _, p := range ps {
			tok, meta, _ := strings.Cut(p.value, "|")
			hs = append(hs, Hold{Kind: kind, Token: tok, Metadata: meta, Fence: p.fence, TTL: p.expires.Sub(now)})
		}
		slices.SortFunc(hs[start:], func(a, b Hold) int { return cmp.Compare(a.TTL, b.TTL) })
	}
	add(KindPermit, m.permits(sem, now))
	if ml, ok := m.live(rw.lease, now); ok {
		tok, meta, _ := strings.Cut(ml.value, "|")
		hs = append(hs, Hold{Kind: KindWrite, Token: tok, Metadata: meta, Fence: m.fences[rw.fence], TTL: ml.expires.Sub(now)})
	}
	add(KindRead, m.permits(readerNames(rw), now))
	hi := holdsInfo{holds: hs}
	if m.writersWaiting(rw, now) {
		q := m.queues[rw.queue]
		hi.writers, hi.writerAge = len(q.order), q.age(now)
	}
	m.pruneQueue(sem, now)
	if q := m.queues[sem.queue]; q != nil {
		hi.permitWaiters, hi.permitAge = len(q.order), q.age(now)
	}
	return hi, nil
}
