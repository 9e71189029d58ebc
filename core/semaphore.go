package core

import (
	"context"
	"fmt"
)

// MaxSemaphoreLimit is the largest number of permits a Semaphore may have.
const MaxSemaphoreLimit = 1 << 16

// A Semaphore hands out up to limit permits of one key at a time: a
// cluster-wide concurrency limit. Get one with Client.Semaphore; it is a
// small value, safe for concurrent use, and making one does no I/O.
//
// A permit is a *Lock with everything a lock has: a random token, a fence
// that strictly rises with every permit of the key (across releases,
// expiry and a Redis restart that lost its data), watchdog renewal, and a
// loss signal (Lost, Err; Do's callback context is cancelled with
// ErrLost). Each permit is a lease of its own, so the permit of a holder
// that died comes back when its TTL runs out, never later, and the
// others are not affected. A waiter sleeps until a release notification
// (or, should one be missed, until the earliest permit's expiry) and then
// tries again.
//
// Waiting cannot starve. With WithFair, a waiter queues at once and
// permits go in arrival order; without it, a waiter competes with
// newcomers for 50 ms (as a Lock waiter does) and then queues. While
// waiters queue, a freed permit goes to the first of them: nobody else
// takes one unless more permits are free than waiters queue, and on
// Redis a release wakes the queued waiter its permit serves, in that
// waiter's process alone. A queued waiter that gives up leaves the queue; one that died is dropped when
// its entry (refreshed by its every attempt) expires, within seconds.
// Info.PermitWaiters counts the queue.
//
// Permits live in one sorted set per key, under the key's hash tag (one
// Cluster slot per semaphore), separate from the key's mutex: a
// Semaphore and a Lock of the same key do not exclude each other. The
// backend is NewRedis (server, Sentinel, Cluster) or NewMemory; on
// NewRedlock every call fails with ErrInvalidOption. WithToken re-enters
// the permit held with that token, and a permit is never re-entered
// through a context.
//
// The limit is not stored: each call counts the permits held against the
// limit it is given. Changing it while permits are held is safe: raising
// it lets more in at once; lowering it lets nobody new in until the
// permits held drop below the new limit — those held keep running (they
// are never revoked), so for a while the count can stand above the new
// limit, never above the largest limit in use. Callers that disagree on
// the limit each enforce their own.
type Semaphore struct {
	c     *Client
	key   string
	limit int
}

// Semaphore returns the semaphore of key with limit permits. An invalid
// key or limit (1 to MaxSemaphoreLimit) is reported by its calls.
func (c *Client) Semaphore(key string, limit int) *Semaphore {
	return &Semaphore{c: c, key: key, limit: limit}
}

// Key returns the semaphore's key.
func (s *Semaphore) Key() string { return s.key }

// Limit returns the number of permits the semaphore hands out.
func (s *Semaphore) Limit() int { return s.limit }

// TryAcquire takes a permit if one is free. It returns ErrNotAcquired
// (wrapped, with the key) when all are held, and otherwise the same errors
// as Client.TryLock.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.c.acquire(ctx, s.key, s.limit, opts, false)
}

// Acquire takes a permit, waiting while all are held, with the bounds and
// errors of Client.Lock.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.c.acquire(ctx, s.key, s.limit, opts, true)
}

// Do takes a permit like Acquire, runs fn with a context that carries it
// (FenceFromContext returns its fence), and gives the permit back when fn
// returns or panics, with the loss reporting of Client.Do.
func (s *Semaphore) Do(ctx context.Context, fn func(context.Context) error, opts ...LockOption) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.c.do(ctx, s.key, s.limit, fn, opts)
}

func (s *Semaphore) check() error {
	if s.limit < 1 || s.limit > MaxSemaphoreLimit {
		return fmt.Errorf("%w: semaphore limit %d (want 1 to %d)", ErrInvalidOption, s.limit, MaxSemaphoreLimit)
	}
	return nil
}

// checkPrimitive refuses what semaphores and read-write locks do not support.
func (c *Client) checkPrimitive(s *settings, limit int) error {
	what := "semaphores"
	if limit < 0 {
		what = "read-write locks"
	}
	if _, ok := c.be.(*redlockBackend); ok {
		return fmt.Errorf("%w: %w: %s need NewRedis or NewMemory, not NewRedlock", ErrInvalidOption, ErrUnsupported, what)
	}
	if c.caps&CapPrimitives == 0 {
		return unsupported(what, CapPrimitives)
	}
	if s.fair && limit < 0 {
		return fmt.Errorf("%w: WithFair is not available on %s", ErrInvalidOption, what)
	}
	return nil
}
