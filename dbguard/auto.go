package dbguard

import (
	"context"
	"errors"
	"sync"
	"time"
)

// deductAuto deducts as Locked while the lock service works, and as
// Optimistic while it does not. Correctness never depends on the lock: the
// optimistic write and the fenced write are both conditional on the row,
// so buyers on either path never oversell, together or apart.
//
// The lock step failing (ErrUnavailable: Redis down, or still answering
// at WithWaitTimeout) trips the breaker: for WithProbeInterval every
// deduction goes straight to Optimistic; then one deduction probes the lock
// again, and if it gets its locks, Auto is back on the lock. Contention
// (ErrBusy from the lock wait) and a rejected fence make only that one
// deduction optimistic. An optimistic deduction that loses WithRetryBudget
// races ends with one Atomic write instead of ErrBusy. It returns the
// strategy that decided the outcome, and notes in r the fallback and the
// optimistic retries.
func (g *Guard) deductAuto(ctx context.Context, items []item, r *run) (Strategy, error) {
	use, probe := g.breaker.allow()
	if use {
		err := g.deductLocked(ctx, items, true)
		switch {
		case errors.Is(err, ErrUnavailable):
			if g.breaker.report(lockFailed, probe) {
				g.stats.outages.Add(1)
			}
		case errors.Is(err, ErrBusy), errors.Is(err, ErrStaleFence):
			g.breaker.report(lockWorked, probe)
		case err == nil:
			g.breaker.report(lockWorked, probe)
			return Locked, nil
		default:
			// Decided without a verdict on the lock service: an unknown or
			// sold-out SKU (perhaps refused before locking), a database
			// error, the caller's context.
			g.breaker.report(lockUnknown, probe)
			return Locked, err
		}
		if ctx.Err() != nil {
			return Locked, err
		}
	}
	g.stats.fallbacks.Add(1)
	r.fallback = true
	err := g.deductOptimistic(ctx, items, r)
	if errors.Is(err, ErrBusy) {
		// The row is too hot for optimism (WithRetryBudget lost races): one
		// conditional UPDATE settles it, so a buyer never sees the outage.
		return Atomic, g.deductAtomic(ctx, items)
	}
	return Optimistic, err
}

// lockOutcome is what one use of the lock says about the lock service.
type lockOutcome int

const (
	lockWorked  lockOutcome = iota // it answered
	lockFailed                     // it failed or was too slow
	lockUnknown                    // the caller gave up first
)

// breaker remembers that the lock service failed, so that deductions stop
// paying WithWaitTimeout for it, and lets one deduction at a time probe it
// once every interval.
type breaker struct {
	interval time.Duration

	mu      sync.Mutex
	open    bool      // the lock service is considered down
	retryAt time.Time // when the next probe may run
	probing bool      // a probe is in flight
}

// allow reports whether a deduction should use the lock, and whether it
// is the probe that decides if the lock service is back.
func (b *breaker) allow() (use, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if b.probing || time.Now().Before(b.retryAt) {
		return false, false
	}
	b.probing = true
	return true, true
}

// report records the outcome of a deduction that used the lock. It returns
// true when this outcome opened the breaker.
func (b *breaker) report(o lockOutcome, probe bool) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	switch o {
	case lockWorked:
		if probe {
			b.open = false
		}
	case lockFailed:
		if b.open && !probe {
			return false // a straggler from before the breaker opened
		}
		opened = !b.open
		b.open = true
		b.retryAt = time.Now().Add(b.interval)
	}
	return opened
}
