package core

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The watchdog is the one goroutine per Client that keeps its leases: it
// renews every auto-renewed lease at ttl/3 (all that are due in one
// pipelined batch), retries a failed renewal while the lease still has time
// left, and declares a lease lost when renewal finds it gone, when it runs
// out of time, or — for a lease without auto-renewal — when its TTL passes.
// It starts with the first lease and stops with Client.Close.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	h       leaseHeap
	armedAt time.Time     // when the loop will look next (zero: idle, waits for a kick)
	kick    chan struct{} // capacity 1: a lease is due before armedAt
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
	calls   sync.WaitGroup // renewal calls still out
}

// maxBatch bounds how many renewals go into one pipeline; batchWindow is how
// early a lease may be renewed to join a batch.
const (
	maxBatch    = 512
	batchWindow = 10 * time.Millisecond
)

func (w *watchdog) init(c *Client) {
	w.c = c
	w.kick = make(chan struct{}, 1)
	w.stop = make(chan struct{})
	w.done = make(chan struct{})
}

// nextDue is when the watchdog must next look at l.
func nextDue(l *lease, from time.Time) time.Time {
	if !l.autoRenew {
		return l.expires
	}
	return from.Add(l.ttl / 3)
}

// schedule (re)places l in the heap at due. It reports false after stop.
func (w *watchdog) schedule(l *lease, due time.Time) bool {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false
	}
	l.due = due
	if l.idx >= 0 {
		heap.Fix(&w.h, l.idx)
	} else {
		heap.Push(&w.h, l)
	}
	// Wake the loop only if it would otherwise look too late: a loop armed
	// for an earlier time picks this lease up then. This keeps the hot path
	// (acquire, release, acquire...) from waking a goroutine every time.
	wake := w.armedAt.IsZero() || due.Before(w.armedAt)
	if wake {
		w.armedAt = due
	}
	if !w.started {
		w.started = true
		go w.run()
	}
	w.mu.Unlock()
	if wake {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return true
}

func (w *watchdog) remove(l *lease) {
	w.mu.Lock()
	if l.idx >= 0 {
		heap.Remove(&w.h, l.idx)
	}
	w.mu.Unlock()
}

// shutdown stops the loop and returns the leases it still kept.
func (w *watchdog) shutdown() []*lease {
	w.mu.Lock()
	w.stopped = true
	started := w.started
	kept := make([]*lease, len(w.h))
	copy(kept, w.h)
	for _, l := range kept {
		l.idx = -1
	}
	w.h = nil
	w.mu.Unlock()
	if started {
		close(w.stop)
		<-w.done
		w.calls.Wait()
	}
	return kept
}

func (w *watchdog) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*lease
	for {
		due = due[:0]
		w.mu.Lock()
		now := time.Now()
		horizon := now.Add(batchWindow)
		for len(w.h) > 0 && len(due) < maxBatch && (!w.h[0].due.After(now) ||
			len(due) > 0 && w.h[0].autoRenew && !w.h[0].due.After(horizon)) {
			due = append(due, heap.Pop(&w.h).(*lease))
		}
		var wait time.Duration
		if len(w.h) > 0 {
			w.armedAt = w.h[0].due
			wait = w.armedAt.Sub(now)
		} else {
			w.armedAt = time.Time{}
		}
		w.mu.Unlock()
		if len(due) > 0 {
			w.process(due)
			continue
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-tick:
		case <-w.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-w.stop:
			return
		}
	}
}

// process handles the leases that came due: expiries and renewals.
func (w *watchdog) process(due []*lease) {
	now := time.Now()
	reqs := make([]extendReq, 0, len(due))
	renew := make([]*lease, 0, len(due))
	expiry := now.Add(time.Hour)
	for _, l := range due {
		l.mu.Lock()
		released, auto, ttl, expires := l.released, l.autoRenew, l.ttl, l.expires
		l.mu.Unlock()
		switch {
		case released:
		case !auto:
			if now.Before(expires) { // extended by hand meanwhile
				w.schedule(l, expires)
			} else {
				l.markLost(lostError(l.key, errors.New("ttl passed without renewal")))
			}
		default:
			reqs = append(reqs, extendReq{n: l.n, token: l.token, ttl: ttl})
			renew = append(renew, l)
			if expires.Before(expiry) {
				expiry = expires
			}
		}
	}
	if len(reqs) == 0 {
		return
	}
	w.renew(now, renew, reqs, expiry)
}

// renew sends one batch of renewals and waits for the answer — but never
// past a lease's expiry: a lease whose expiry passes while the call is
// still out is lost then, whatever the Redis client's own timeouts.
//
// Each attempt may take a third of the time the earliest lease has left,
// so that a failing one returns its own error (a refused connection, say)
// in time for another attempt, rather than a timeout at the expiry.
func (w *watchdog) renew(now time.Time, renew []*lease, reqs []extendReq, expiry time.Time) {
	var ends []func(OpResult)
	if obs := w.c.cfg.observer; obs != nil {
		ends = make([]func(OpResult), len(renew))
		for i, l := range renew {
			_, ends[i] = obs.OpStart(context.Background(), OpRenew, l.key)
		}
	}
	attempt := max(expiry.Sub(now)/3, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), attempt)
	done := make(chan struct{})
	w.calls.Add(1)
	go func() {
		defer w.calls.Done()
		defer cancel()
		w.c.be.extend(ctx, reqs)
		for i, l := range renew {
			if ends != nil {
				err := reqs[i].err
				if err == nil && !reqs[i].ok {
					err = fmt.Errorf("%w: %q: lease expired or taken over", ErrNotHeld, l.key)
				}
				ends[i](OpResult{Err: err, Fence: l.fence})
			}
		}
		close(done)
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var next time.Time
		for _, l := range renew {
			l.mu.Lock()
			live, expires := !l.released && l.lostErr == nil, l.expires
			l.mu.Unlock()
			if live && (next.IsZero() || expires.Before(next)) {
				next = expires
			}
		}
		if next.IsZero() { // all released or lost: the answer no longer matters
			return
		}
		timer.Reset(time.Until(next))
		select {
		case <-done:
			for i, l := range renew {
				w.c.renewed(l, now, reqs[i].ok, reqs[i].err)
			}
			return
		case <-timer.C:
			t := time.Now()
			for _, l := range renew {
				l.mu.Lock()
				expired, last := !t.Before(l.expires), l.renewErr
				l.mu.Unlock()
				if !expired {
					continue
				}
				cause := errors.New("no answer to its renewal before it expired")
				if last != nil { // the failure that started the trouble says more
					cause = fmt.Errorf("renewal failed until expiry: %w", last)
				}
				l.markLost(lostError(l.key, cause))
			}
		case <-w.stop:
			return
		}
	}
}

// retryDelay is the pause before retrying a failed renewal.
func retryDelay(ttl time.Duration) time.Duration {
	d := ttl / 10
	if d > time.Second {
		d = time.Second
	}
	if d < 5*time.Millisecond {
		d = 5 * time.Millisecond
	}
	return d
}

// leaseHeap orders leases by due time.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.idx = -1
	return l
}
