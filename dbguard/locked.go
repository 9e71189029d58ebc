package dbguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
)

// errLockSlow is the cause of the lock context's deadline: the lock
// service was still busy answering when WithWaitTimeout ran out.
var errLockSlow = errors.New("dbguard: lock timeout")

// deductLocked takes the core lock of every SKU in sorted order, then
// writes each row with a fenced conditional UPDATE (in one transaction for
// several SKUs) and releases the locks. The fence condition rejects the
// write of a holder whose lease expired while it paused, once a later
// holder has written; such a deduction changed nothing and is retried with
// fresh locks, up to WithRetryBudget attempts. Under Auto (auto true) it is not
// retried: the caller falls back to Optimistic instead.
//
// A first unlocked read refuses an unknown SKU or a sold-out one at once,
// without queueing for its lock. Errors from the lock step match ErrBusy
// (other buyers held it past the wait) or ErrUnavailable (the lock
// service failed or was too slow); nothing was written then.
func (g *Guard) deductLocked(ctx context.Context, items []item, auto bool) error {
	if err := g.precheck(ctx, items); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := g.lockedOnce(ctx, items)
		switch {
		case errors.Is(err, errSoldOut):
			// Another buyer found a SKU short while this one queued: read
			// again, and queue again only if it was restocked meanwhile.
			if err := g.precheck(ctx, items); err != nil {
				return err
			}
		case errors.Is(err, ErrStaleFence):
			g.stats.staleFences.Add(1)
			if auto {
				return err
			}
		default:
			return err
		}
		if attempt+1 >= g.cfg.retries {
			if errors.Is(err, errSoldOut) { // restocked and sold out, over and over
				return fmt.Errorf("%w: %q: %d attempts: %w", ErrBusy, items[0].sku, attempt+1, err)
			}
			return err
		}
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			return err
		}
	}
}

// precheck refuses an unknown or short SKU from a plain read, and tells
// the deductions queued for a short SKU's lock.
func (g *Guard) precheck(ctx context.Context, items []item) error {
	for _, it := range items {
		var have int64
		err := g.queryRow(ctx, g.db, g.q.selQty, it.sku).Scan(&have)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownSKU, it.sku)
		}
		if err != nil {
			return fmt.Errorf("dbguard: read %q: %w", it.sku, err)
		}
		if have < it.qty {
			g.waiting.short(it.sku, have)
			return insufficient(it, have)
		}
	}
	return nil
}

// lockedOnce is one attempt: lock, write, release.
func (g *Guard) lockedOnce(ctx context.Context, items []item) error {
	locks, err := g.lockAll(ctx, items)
	if err != nil {
		return err
	}
	defer g.releaseAll(ctx, locks)
	fences := make([]int64, len(items))
	for i, lk := range locks.Locks() { // in sorted key order, as items
		fences[i] = lk.Fence()
		if h := g.beforeFencedWrite; h != nil {
			h(ctx, items[i].sku, fences[i])
		}
	}
	return g.writeFenced(ctx, items, fences)
}

// lockAll locks every item's SKU with core's LockAll (sorted order, all or
// nothing), within WithWaitTimeout in all.
func (g *Guard) lockAll(ctx context.Context, items []item) (*core.Group, error) {
	lctx, cancel := context.WithTimeoutCause(ctx, g.cfg.lockTimeout, errLockSlow)
	defer cancel()
	wctx, stop := context.WithCancelCause(lctx)
	defer stop(nil)
	for _, it := range items {
		e := g.waiting.add(it.sku, it.qty, stop)
		defer g.waiting.remove(it.sku, e)
	}
	deadline, _ := lctx.Deadline()
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = g.lockKey(it.sku)
	}
	// Waiting for other buyers ends before the context does, so that
	// contention (ErrBusy) and a slow lock service tell apart.
	wait := max(time.Until(deadline)*3/4, time.Millisecond)
	locks, err := g.cfg.locker.LockAll(wctx, keys, core.WithWaitTimeout(wait))
	if err != nil {
		return nil, g.lockError(ctx, strings.Join(keys, ","), err)
	}
	return locks, nil
}

// lockError classifies a failed lock: the caller's context ended, other
// buyers held the lock past the wait (ErrBusy), or the lock service failed
// or was too slow (ErrUnavailable).
func (g *Guard) lockError(ctx context.Context, key string, err error) error {
	switch {
	case ctx.Err() != nil, errors.Is(err, errSoldOut):
		return fmt.Errorf("dbguard: lock %q: %w", key, err)
	case errors.Is(err, errLockSlow):
		return fmt.Errorf("%w: lock %q: %w", ErrUnavailable, key, err)
	case errors.Is(err, core.ErrNotAcquired):
		return fmt.Errorf("%w: lock %q: %w", ErrBusy, key, err)
	default:
		return fmt.Errorf("%w: lock %q: %w", ErrUnavailable, key, err)
	}
}

// releaseAll releases locks, even when ctx has ended (core detaches the
// release from ctx's cancellation and bounds it). A failed release is
// ignored: the deduction is decided by then, and the lease expires by
// itself. The buyer waits for the release at most WithWaitTimeout: a
// release held up by a stalled Redis finishes in the background, within
// core's own bound.
func (g *Guard) releaseAll(ctx context.Context, locks *core.Group) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = locks.Release(ctx)
	}()
	t := time.NewTimer(g.cfg.lockTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// writeFenced writes every item with its fence: "SET qty = qty - n, fence
// = f WHERE qty >= n AND fence < f", in one transaction for several items.
// When the write fails other than by the row's refusal, the locks are
// still held, so the first row's fence settles whether it committed (see
// settleFenced): a lost answer is ErrOutcomeUnknown only when the row
// cannot tell.
func (g *Guard) writeFenced(ctx context.Context, items []item, fences []int64) error {
	refused := false
	write := func(q querier) error {
		refused = false
		for i, it := range items {
			f := fences[i]
			live := ctx.Err() == nil
			n, err := g.exec(ctx, q, g.q.updFenced, it.qty, f, it.sku, it.qty, f)
			if err != nil {
				return deductError(q, live, it.sku, err)
			}
			if n != 1 {
				refused = true
				return g.fencedRefusal(ctx, q, it, f)
			}
		}
		return nil
	}
	var err error
	if len(items) == 1 {
		err = g.retry(ctx, func() error { return write(g.db) })
	} else {
		err = g.inTx(ctx, write)
	}
	if err == nil || refused {
		return err
	}
	return g.settleFenced(ctx, items[0], fences[0], err)
}

// fencedRefusal explains why a fenced UPDATE changed no row.
func (g *Guard) fencedRefusal(ctx context.Context, q querier, it item, fence int64) error {
	var have, stored int64
	err := g.queryRow(ctx, q, g.q.selDiag, it.sku).Scan(&have, &stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %q", ErrUnknownSKU, it.sku)
	case err != nil:
		return fmt.Errorf("dbguard: deduct %q: %w", it.sku, err)
	case stored >= fence:
		return fmt.Errorf("%w: %q: fence %d, the row holds %d", ErrStaleFence, it.sku, fence, stored)
	}
	g.waiting.short(it.sku, have)
	return insufficient(it, have)
}
