package sqllock_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/sqllock"
)

// Cleanup must not stall the live keys: on InnoDB a DELETE that scans the
// table in REPEATABLE READ locks every row it reads, expired or not, until
// it ends — and it ends only after the rows other transactions hold. Here
// an open transaction holds key z's row; a cleanup waits for it; a lock of
// key a, which precedes z, must not wait too.
func TestCleanupDoesNotLockLiveRows(t *testing.T) {
	db := databases[2].open(t)
	opt := table(t, db)
	c := newClient(t, db, opt, sqllock.WithCleanupEvery(0))
	ctx := ctxT(t)
	for _, k := range []string{"a", "z"} {
		l, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other := databases[2].open(t)
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+sqllock.TableOf(opt)+" SET ver = ver + 1 WHERE name = ?", "latchkey:{z}"); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(3*time.Second, func() { _ = tx.Rollback() })
	cleaned := make(chan error, 1)
	go func() { cleaned <- sqllock.Cleanup(ctx, db, opt) }()
	time.Sleep(300 * time.Millisecond) // the cleanup waits for z
	start := time.Now()
	l, err := c.TryLock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	_ = l.Release(ctx)
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
	if took > time.Second {
		t.Fatalf("TryLock of a live key waited %v behind a cleanup", took)
	}
}
