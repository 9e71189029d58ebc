package core

import (
	"context"
	"fmt"
	"sync"
	"time"
)

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
// found another owner or no lease, no renewal was confirmed before the
// lease's belief deadline, the TTL passed without renewal
// (WithAutoRenew(false)), or the Client was closed. It closes no later than
// the moment the server could let anyone else take the key (less the drift
// margin; see WithDriftMargin), whatever the network or the server is
// doing. It is never closed by a normal Release.
//
// The channel is closed by a timer, which a runtime starved of CPU may run
// late; Lost and Err themselves never answer late: called after the
// deadline, they find the lease lost (and close the channel) at once. A
// holder that checks between writes should call Lost (or Err) each time,
// not keep the channel of an earlier call.
func (h *Lock) Lost() <-chan struct{} {
	l := h.l
	l.mu.Lock()
	if l.lostCh == nil {
		l.lostCh = make(chan struct{})
		if l.signaled {
			close(l.lostCh)
		}
	}
	ch := l.lostCh
	l.lapsed()
	return ch
}

// Err returns nil while the lease is held or after a normal Release, and an
// error matching ErrLost, with the reason, once it is lost (from its
// deadline on, as Lost).
func (h *Lock) Err() error {
	l := h.l
	l.mu.Lock()
	if !l.lapsed() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// WithContext returns a copy of ctx that carries the lease, so that a
// TryLock, Lock or Do of the same key on the same Client with that context
// re-enters it instead of waiting for itself. Do does this for its callback.
func (h *Lock) WithContext(ctx context.Context) context.Context {
	return h.l.c.bind(ctx, h.l)
}

// Extend makes the lease last at least ttl from now, if this handle's
// lease still holds the key, and later renewals ask for ttl. It never
// shortens the lease: when the lease already has more than ttl left, only
// the renewal period changes (a lease's expiry never moves backwards, so a
// renewal racing an Extend cannot cut it short behind the holder's back).
// It returns ErrNotHeld (and the lease counts as lost) when the lease is
// gone or held by someone else, ErrClosed after Client.Close, and
// ErrInvalidTTL for a ttl under one millisecond. A failed call leaves the
// lease and its deadline as they were.
func (h *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	ttl = ttl.Truncate(time.Millisecond) // Redis counts whole milliseconds
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q: this handle was released", ErrNotHeld, h.l.key)
	}
	return h.l.c.extend(ctx, h.l, ttl)
}

// Release gives the lock up. It runs even when ctx is already cancelled
// (with ctx's values, a short timeout and no cancellation), so a cancelled
// request never strands a lease until its TTL. It is idempotent: later calls
// return the first call's result. It returns ErrNotHeld when the lease had
// already expired or been taken over (the new owner is not disturbed), and
// ErrClosed when Client.Close gave the lease up first. Releasing a
// re-entered handle only drops its hold. On Redis the release of a mutex
// lease or write hold whose answer was lost, and which the go-redis client
// sent again (MaxRetries), knows it released when nobody took the key
// since (NewRedis says when it does not). So such a lease that expired,
// or that the server lost, with nobody taking the key since reads as
// released (nobody else held the key meanwhile); a holder is told of an
// expiry by Lost and Err, before it.
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
