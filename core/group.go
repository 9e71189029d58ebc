package core

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/latchkey/latchkey/internal/errjoin"
)

// MaxGroupKeys is the most keys LockAll and TryLockAll take at once.
const MaxGroupKeys = 1024

// A Group is the set of locks LockAll or TryLockAll took together: every
// key or none. Its members are ordinary leases, each renewed by the
// watchdog (in the same batches, where the keys share a Redis node) and
// each with its own fence.
type Group struct {
	locks []*Lock
	lost  chan struct{}
	once  sync.Once
	stops []func()
}

// LockAll locks every key, waiting for those held, or none: an attempt
// that fails (ctx ended, a wait bound ran out, the backend failed) gives
// back the keys it took before it returns. Keys are taken in sorted order
// (duplicates once), so two callers asking for the same keys in any
// orders never deadlock. WithWaitTimeout and WithRetryBudget bound the
// whole call; the other options apply to every key. The errors are those
// of Lock, for the key that failed; no keys is ErrInvalidOption, more
// than MaxGroupKeys too.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...LockOption) (*Group, error) {
	return c.lockAll(ctx, keys, opts, true)
}

// TryLockAll locks every key if none is held by someone else, with one
// attempt each, in sorted order; otherwise it gives back what it took and
// returns an error matching ErrNotAcquired (or the backend's error, as
// TryLock).
func (c *Client) TryLockAll(ctx context.Context, keys []string, opts ...LockOption) (*Group, error) {
	return c.lockAll(ctx, keys, opts, false)
}

func (c *Client) lockAll(ctx context.Context, keys []string, opts []LockOption, wait bool) (*Group, error) {
	if len(keys) == 0 || len(keys) > MaxGroupKeys {
		return nil, fmt.Errorf("%w: %d keys (want 1 to %d)", ErrInvalidOption, len(keys), MaxGroupKeys)
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if wait { // one bound for the whole call, not one per key
		s, err := c.prepare(ctx, sorted[0], opts)
		if err != nil {
			return nil, err
		}
		if s.waitTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, s.waitTimeout,
				fmt.Errorf("wait timeout %v: %w", s.waitTimeout, context.DeadlineExceeded))
			defer cancel()
		}
	}
	g := &Group{lost: make(chan struct{})}
	for _, k := range sorted {
		var l *Lock
		var err error
		if wait {
			l, err = c.Lock(ctx, k, opts...)
		} else {
			l, err = c.TryLock(ctx, k, opts...)
		}
		if err != nil {
			_ = g.Release(context.WithoutCancel(ctx)) // all or nothing
			return nil, err
		}
		g.locks = append(g.locks, l)
		g.stops = append(g.stops, l.l.notifyLost(func(error) { g.once.Do(func() { close(g.lost) }) }))
	}
	return g, nil
}

// Locks returns the group's locks, in sorted key order.
func (g *Group) Locks() []*Lock { return slices.Clone(g.locks) }

// Lost is closed when any member is lost; the group then protects nothing
// (see Lock.Lost), and Release gives back the rest.
func (g *Group) Lost() <-chan struct{} { return g.lost }

// Release gives back every member, concurrently, even on a cancelled ctx
// (each bounded, as Lock.Release). Its error joins the members' errors: a
// member already lost reports ErrNotHeld or ErrLost, as Lock.Release does.
func (g *Group) Release(ctx context.Context) error {
	for _, stop := range g.stops {
		stop()
	}
	errs := make([]error, len(g.locks))
	var wg sync.WaitGroup
	for i, l := range g.locks {
		wg.Go(func() { errs[i] = l.Release(ctx) })
	}
	wg.Wait()
	return errjoin.Join(errs...)
}
