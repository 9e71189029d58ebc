package core

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

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
// back the keys it took before it returns.
//
// Keys that one server stores together — any keys on a single Redis
// server or Sentinel group, keys of one Cluster hash slot, the memory
// backend — are first tried in one atomic step (one script: every key is
// taken, or none is touched). Keys share a slot when they share the part
// before a '}': "order7}sku1" and "order7}sku2" do. Otherwise, and once
// that step found a key held, keys are taken one by one in sorted order
// (duplicates once), waiting for each, so two callers asking for the same
// keys in any orders never deadlock, and a caller is not starved by
// single-key lockers. A key taken early that is lost while the call waits
// for the others (its renewal failed, WithAutoRenew(false) with a short
// TTL) fails the call: it gives back the rest and returns an error
// matching ErrNotAcquired and ErrLost. WithFair, WithToken and a ctx that carries a lease
// of one of the keys (which is re-entered) always take the keys one by
// one; so does WithReplicaAck. WithWaitTimeout and WithRetryBudget bound the
// whole call; the other options apply to every key. The errors are those
// of Lock, for the key that failed; no keys is ErrInvalidOption, more
// than MaxGroupKeys too.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...LockOption) (*Group, error) {
	return c.lockAll(ctx, keys, opts, true)
}

// TryLockAll locks every key if none is held by someone else — in one
// atomic step where one server stores them all (see LockAll), else with
// one attempt each, in sorted order; otherwise it gives back what it took
// and returns an error matching ErrNotAcquired (or the backend's error,
// as TryLock).
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
	s, err := c.prepare(ctx, sorted[0], opts)
	if err != nil {
		return nil, err
	}
	if wait && s.waitTimeout > 0 { // one bound for the whole call, not one per key
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.waitTimeout,
			fmt.Errorf("wait timeout %v: %w", s.waitTimeout, context.DeadlineExceeded))
		defer cancel()
	}
	g := &Group{lost: make(chan struct{})}
	if done, err := c.lockAllAtOnce(ctx, g, sorted, &s, wait); done {
		if err != nil {
			return nil, err
		}
		return g, nil
	}
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
		g.add(l)
	}
	select {
	case <-g.lost: // a member taken early was lost while the call waited for the others
		var lost []string
		for _, l := range g.locks {
			if l.Err() != nil {
				lost = append(lost, l.Key())
			}
		}
		_ = g.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: %q lost while LockAll waited for the other keys: %w", ErrNotAcquired, lost, ErrLost)
	default:
	}
	return g, nil
}

// add makes l a member of g.
func (g *Group) add(l *Lock) {
	g.locks = append(g.locks, l)
	g.stops = append(g.stops, l.l.notifyLost(func(error) { g.once.Do(func() { close(g.lost) }) }))
}

// lockAllAtOnce takes every key of sorted in one atomic step where the
// backend can (one script on one server or Cluster slot), filling g. It
// reports done false when the caller should take the keys one by one
// instead: the backend cannot take them together, an option needs the
// one-by-one path (WithFair, WithToken, a lease ctx carries, which is
// re-entered), or LockAll found a key held (it then waits key by key,
// holding what it took, so that it is not starved by single-key lockers).
// done is true with an error for a final failure: TryLockAll's contention,
// a backend failure, Close.
func (c *Client) lockAllAtOnce(ctx context.Context, g *Group, sorted []string, s *settings, wait bool) (done bool, err error) {
	aa, ok := c.be.(allAcquirer)
	if !ok || len(sorted) < 2 || s.fair || s.token != "" || c.carriesAny(ctx, sorted) {
		return false, nil
	}
	ns := make([]names, len(sorted))
	for i, k := range sorted {
		ns[i] = c.names(k)
	}
	if !aa.canAcquireAll(ns) {
		return false, nil
	}
	toks := make([]string, len(sorted))
	values := make([]string, len(sorted))
	for i := range sorted {
		toks[i] = rand.Text()
		values[i] = toks[i]
		if s.metadata != "" {
			values[i] += "|" + s.metadata
		}
	}
	s.kind = KindLock
	ctxs := make([]context.Context, len(sorted))
	var r allResult
	if obs := c.cfg.observer; obs != nil {
		ends := make([]func(OpResult), len(sorted))
		for i, k := range sorted {
			ctxs[i], ends[i] = obs.OpStart(ctx, OpAcquire, k, KindLock)
		}
		defer func() {
			for i, end := range ends {
				res := OpResult{Err: err, Attempts: 1}
				switch {
				case err == nil && r.held >= 0:
					res.Err = fmt.Errorf("%w: %q", ErrNotAcquired, sorted[r.held])
				case err == nil:
					res.Fence = r.fences[i]
				}
				end(res)
			}
		}()
	} else {
		for i := range ctxs {
			ctxs[i] = ctx
		}
	}

	c.attempts.RLock()
	defer c.attempts.RUnlock()
	select {
	case <-c.done:
		return true, ErrClosed
	default:
	}
	start := time.Now()
	r, err = aa.acquireAll(ctx, ns, values, s.ttl)
	switch {
	case err != nil:
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = errjoin.Join(err, cause)
		}
		for i := range ns { // the script may have run: take back what it may have set
			c.forget(context.WithoutCancel(ctx), ns[i], toks[i])
		}
		return true, fmt.Errorf("%w: acquire %q: %w", ErrUnavailable, sorted, err)
	case r.held >= 0 && wait:
		return false, nil
	case r.held >= 0:
		return true, fmt.Errorf("%w: %q", ErrNotAcquired, sorted[r.held])
	}
	if err := tooLate(sorted, start, s); err != nil {
		for i := range ns {
			c.forget(context.WithoutCancel(ctx), ns[i], toks[i])
		}
		return true, err
	}
	for i, k := range sorted {
		h, rerr := c.register(ctxs[i], k, ns[i], toks[i], r.fences[i], s, start, nil)
		if rerr != nil { // closed meanwhile: give back the rest too
			for j := i + 1; j < len(ns); j++ {
				c.forget(context.WithoutCancel(ctx), ns[j], toks[j])
			}
			_ = g.Release(context.WithoutCancel(ctx))
			g.locks, g.stops = nil, nil
			return true, ErrClosed
		}
		g.add(h)
	}
	return true, nil
}

// Locks returns the group's locks, in sorted key order.
func (g *Group) Locks() []*Lock { return slices.Clone(g.locks) }

// Lost is closed when any member is lost; the group then protects nothing
// (see Lock.Lost), and Release gives back the rest. As Lock.Lost, it
// finds a member past its deadline lost when called, its timer run or not.
func (g *Group) Lost() <-chan struct{} {
	for _, h := range g.locks {
		h.l.mu.Lock()
		if h.l.lapsed() {
			break
		}
	}
	return g.lost
}

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
