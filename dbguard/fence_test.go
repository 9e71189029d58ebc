package dbguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
)

// storedFence reads the fence column of sku.
func storedFence(t testing.TB, db *sql.DB, table, sku string) int64 {
	t.Helper()
	var f int64
	q := fmt.Sprintf("SELECT fence FROM %s WHERE sku = %s", table, placeholder(db)(1))
	if err := db.QueryRowContext(ctxFor(t, 10*time.Second), q, sku).Scan(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// Kleppmann's pause: a holder gets the SKU lock, pauses past its TTL (a GC
// pause, a swap storm), the next holder locks and writes, and then the
// first one wakes up and writes. The fence rejects that late write.
func TestPausedHolderCannotWriteAfterNextHolder(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		locker := miniLocker(t)
		g, table := newGuard(t, db, map[string]int64{"sku": 10},
			dbguard.WithStrategy(dbguard.Locked), dbguard.WithLocks(locker))
		ctx := ctxFor(t, 30*time.Second)

		// The stale holder: a lease of 200 ms that nobody renews.
		stale, err := locker.TryLock(ctx, dbguard.LockKey(g, "sku"),
			core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-stale.Lost():
		case <-ctx.Done():
			t.Fatal("the stale lease never expired")
		}

		// The next holder takes the lock (a higher fence) and writes.
		must(t, g.Deduct(ctx, "sku", 1))
		next := storedFence(t, db, table, "sku")
		if next <= stale.Fence() {
			t.Fatalf("the next holder wrote fence %d, not above the stale %d", next, stale.Fence())
		}

		// The stale holder wakes and writes with its old fence: rejected.
		err = dbguard.DeductFenced(ctx, g, "sku", 1, stale.Fence())
		if !errors.Is(err, dbguard.ErrStaleFence) {
			t.Fatalf("stale write: got %v, want ErrStaleFence", err)
		}
		if n := mustStock(t, g, "sku"); n != 9 {
			t.Fatalf("stock %d after the rejected write, want 9", n)
		}
		if f := storedFence(t, db, table, "sku"); f != next {
			t.Fatalf("the rejected write moved the fence from %d to %d", next, f)
		}
		// Writes carry on with newer fences; the fence only grows.
		must(t, dbguard.DeductFenced(ctx, g, "sku", 1, next+1))
		if n := mustStock(t, g, "sku"); n != 8 {
			t.Fatalf("stock %d, want 8", n)
		}
	})
}

// The same scenario through Deduct itself: buyer A holds the lock and
// pauses right before its write; its lease (no renewal) expires; buyer B
// locks, writes and returns; A wakes. A's fenced write is rejected, and A's
// deduction starts over under a fresh lock: both buyers get their unit, no
// update is lost and no stale write lands.
func TestPausedDeductionIsFencedAndRetried(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		locker := miniLocker(t, core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
		g, table := newGuard(t, db, map[string]int64{"sku": 10},
			dbguard.WithStrategy(dbguard.Locked), dbguard.WithLocks(locker), dbguard.WithWaitTimeout(20*time.Second))
		ctx := ctxFor(t, 30*time.Second)

		paused := make(chan int64)
		resume := make(chan struct{})
		var calls atomic.Int32
		dbguard.SetBeforeFencedWrite(g, func(_ context.Context, _ string, fence int64) {
			if calls.Add(1) == 1 { // buyer A's first attempt
				paused <- fence
				<-resume
			}
		})
		errA := make(chan error, 1)
		go func() { errA <- g.Deduct(ctx, "sku", 1) }()
		fenceA := <-paused

		// B waits for A's lease to expire, then deducts.
		if err := g.Deduct(ctx, "sku", 1); err != nil {
			close(resume)
			<-errA
			t.Fatalf("buyer B: %v", err)
		}
		fenceB := storedFence(t, db, table, "sku")
		if fenceB <= fenceA {
			t.Fatalf("B wrote fence %d, not above A's %d", fenceB, fenceA)
		}
		close(resume)
		if err := <-errA; err != nil {
			t.Fatalf("buyer A: %v", err)
		}
		st := g.Stats()
		if st.StaleFences != 1 {
			t.Fatalf("StaleFences = %d, want 1 (A's write after B's)", st.StaleFences)
		}
		if n := mustStock(t, g, "sku"); n != 8 {
			t.Fatalf("stock %d, want 8: each buyer took exactly one unit", n)
		}
		if f := storedFence(t, db, table, "sku"); f <= fenceB {
			t.Fatalf("A's retry wrote fence %d, not above B's %d", f, fenceB)
		}
	})
}
