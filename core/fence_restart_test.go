package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// Fences rise across a restart that lost only the latest writes: the
// server comes back from its last snapshot (or a replica that had not yet
// had them is promoted) with the fence counter as it was then, below
// fences handed out since. The next fence is above them all the same: no
// fence is below the server clock at the time it is handed out. From the
// review of the fence's retention.
func TestFenceRisesAcrossSnapshotRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	open := func() (*redis.Client, *core.Client) { return restartClient(t, srv, "snapfence") }
	rdb, c := open()
	bg := context.Background()
	take := func(c *core.Client) int64 {
		t.Helper()
		var l *core.Lock
		var err error
		for range 50 { // the server may still be loading its snapshot
			if l, err = c.TryLock(bg, "k"); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
		return l.Fence()
	}
	f1 := take(c)
	if err := rdb.Save(bg).Err(); err != nil { // a periodic snapshot
		t.Fatal(err)
	}
	f2 := take(c)
	f3 := take(c)
	srv.Restart(t) // the process dies; the server loads the snapshot
	_, c2 := open()
	f4 := take(c2)
	t.Logf("fences: %d (snapshot), %d, %d, after the restart %d", f1, f2, f3, f4)
	if f4 <= f3 {
		t.Fatalf("fence %d after a restart from a snapshot, not above %d handed out before it", f4, f3)
	}
}

// The same for a lease the restart brought back and its token then
// re-enters (WithToken): the re-entry takes a new fence, above the
// fences handed out after the snapshot. From the second review of the
// fence.
func TestReentryFenceRisesAcrossSnapshotRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	open := func() (*redis.Client, *core.Client) { return restartClient(t, srv, "snapreentry") }
	rdb, c := open()
	bg := context.Background()
	take := func(c *core.Client, opts ...core.LockOption) *core.Lock {
		t.Helper()
		var l *core.Lock
		var err error
		for range 50 { // the server may still be loading its snapshot
			if l, err = c.TryLock(bg, "m", opts...); err == nil {
				return l
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal(err)
		return nil
	}
	token := []core.LockOption{core.WithToken("job-7"), core.WithTTL(time.Minute)}
	l1 := take(c, token...)
	if err := rdb.Save(bg).Err(); err != nil { // the snapshot has l1's lease
		t.Fatal(err)
	}
	if err := l1.Release(bg); err != nil {
		t.Fatal(err)
	}
	l2 := take(c)
	if err := l2.Release(bg); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t) // l1's lease is back
	_, c2 := open()
	l3 := take(c2, token...)
	defer l3.Release(bg)
	t.Logf("fences: %d (in the snapshot), %d, re-entered after the restart %d", l1.Fence(), l2.Fence(), l3.Fence())
	if l3.Fence() <= l2.Fence() {
		t.Fatalf("re-entry after a restart from a snapshot got fence %d, not above %d handed out before it", l3.Fence(), l2.Fence())
	}
}

// restartClient opens a Client on srv that retries through a restart.
func restartClient(t *testing.T, srv *redistest.Server, prefix string) (*redis.Client, *core.Client) {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 5})
	t.Cleanup(func() { _ = rdb.Close() })
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { _ = c.Close() })
	return rdb, c
}
