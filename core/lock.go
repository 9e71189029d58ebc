package core

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A lease is one acquisition of a key, shared by the handles that re-enter it.
type lease struct {
	c     *Client
	key   string
	n     names
	token string
	fence int64
	start time.Time // when it was acquired

	mu        sync.Mutex
	ttl       time.Duration
	autoRenew bool
	expires   time.Time // local, conservative: measured from before the request
	holds     int       // handles not yet released
	released  bool
	renewErr  error         // the failure of the renewals since the last success
	lostErr   error         // non-nil once lost
	lostCh    chan struct{} // made on demand; closed when lost
	signaled  bool          // lostCh is (to be) closed
	onLost    []func(error) // called once when lost (Do's cancel)

	// watchdog bookkeeping, guarded by watchdog.mu
	due time.Time
	idx int // heap index, -1 when not scheduled
}

// A Lock is a handle on a held lease. Its methods are safe for concurrent
// use. A handle obtained by re-entering (a nested TryLock/Lock/Do on a
// context that carries the lease) shares the lease; releasing it only drops
// its hold.
type Lock struct {
	l *lease

	mu       sync.Mutex
	released bool
	relErr   error
}

// Key returns the lock key as given to TryLock, Lock or Do.
func (h *Lock) Key() string { return h.l.key }

// Token returns the lease's token: 128 random bits from crypto/rand, or the
// token given with WithToken. Hand it to WithToken to re-enter the lease
// from elsewhere.
func (h *Lock) Token() string { return h.l.token }

// Fence returns the lease's fencing token. Fences of one key strictly
// increase with every acquisition, across clients, processes and restarts
// of the Redis server. Send it with every write the lock protects, and have
// the storage reject a write whose fence is lower than the last one it
// accepted: that, not the lock alone, stops a holder that paused past its
// TTL from overwriting its successor's work.
func (h *Lock) Fence() int64 { return h.l.fence }

// Lost returns a channel that is closed when the lease is lost: renewal
// found another owner or no lease, renewal failed until the lease expired,
// the TTL passed without renewal (WithAutoRenew(false)), or the Client was
// closed. It is never closed by a normal Release.
func (h *Lock) Lost() <-chan struct{} {
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostCh == nil {
		l.lostCh = make(chan struct{})
		if l.signaled {
			close(l.lostCh)
		}
	}
	return l.lostCh
}

// Err returns nil while the lease is held or after a normal Release, and an
// error matching ErrLost, with the reason, once it is lost.
func (h *Lock) Err() error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return h.l.lostErr
}

// WithContext returns a copy of ctx that carries the lease, so that a
// TryLock, Lock or Do of the same key on the same Client with that context
// re-enters it instead of waiting for itself. Do does this for its callback.
func (h *Lock) WithContext(ctx context.Context) context.Context {
	return h.l.c.bind(ctx, h.l)
}

// Extend sets the lease to expire ttl from now, if this handle's lease
// still holds the key; later renewals use the new ttl. It returns
// ErrNotHeld (and the lease counts as lost) when the lease is gone or held
// by someone else, and ErrInvalidTTL for a ttl under one millisecond.
func (h *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q: handle released", ErrNotHeld, h.l.key)
	}
	return h.l.c.extend(ctx, h.l, ttl)
}

// Release gives the lock up. It runs even when ctx is already cancelled
// (with ctx's values, a short timeout and no cancellation), so a cancelled
// request never strands a lease until its TTL. It is idempotent: later calls
// return the first call's result. It returns ErrNotHeld when the lease had
// already expired or been taken over; the new owner is not disturbed.
// Releasing a re-entered handle only drops its hold.
func (h *Lock) Release(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.relErr
	}
	h.released = true
	h.relErr = h.l.c.release(ctx, h.l)
	return h.relErr
}

// markLost records the loss of l once and tells everyone who asked.
func (l *lease) markLost(cause error) {
	l.mu.Lock()
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	l.lostErr = cause
	fns := l.onLost
	l.onLost = nil
	l.mu.Unlock()
	// The observer hears of it first, so that a holder woken by Lost sees
	// the loss already recorded in its trace.
	if obs := l.c.cfg.observer; obs != nil {
		obs.LeaseLost(l.key, l.fence, time.Since(l.start), cause)
	}
	l.mu.Lock()
	l.signaled = true
	if l.lostCh != nil {
		close(l.lostCh)
	}
	l.mu.Unlock()
	for _, f := range fns {
		f(cause)
	}
}

// notifyLost calls f when l is lost (at once if it already is).
func (l *lease) notifyLost(f func(error)) {
	l.mu.Lock()
	if err := l.lostErr; err != nil {
		l.mu.Unlock()
		f(err)
		return
	}
	l.onLost = append(l.onLost, f)
	l.mu.Unlock()
}

func lostError(key string, reason error) error {
	return fmt.Errorf("%w: %q: %w", ErrLost, key, reason)
}
