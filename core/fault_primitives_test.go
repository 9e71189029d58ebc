package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// TestFaultPrimitivesToldFirst: the promise of the lock holds for every
// primitive — a holder cut off from Redis (its renewals black-holed) is
// told it lost its hold (Lost) no later than a rival, on a healthy
// connection, takes its place: another permit beyond the limit, the write
// hold over its read hold, a read hold over its write hold, the next
// leadership. The rival tries every few milliseconds; the only slack
// allowed is the test process's own scheduling (25 ms, as the belief
// checker's).
func TestFaultPrimitivesToldFirst(t *testing.T) {
	faultTest(t)
	const ttl = 600 * time.Millisecond
	const slack = 25 * time.Millisecond
	for _, tc := range []struct {
		name string
		hold func(ctx context.Context, c *core.Client) (*core.Lock, error)
		take func(ctx context.Context, c *core.Client) (*core.Lock, error)
	}{
		{"semaphore permit",
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.Semaphore("sem", 1).TryAcquire(ctx, core.WithTTL(ttl))
			},
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.Semaphore("sem", 1).TryAcquire(ctx, core.WithTTL(ttl))
			}},
		{"read hold",
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.RWMutex("rw").TryRLock(ctx, core.WithTTL(ttl))
			},
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.RWMutex("rw").TryLock(ctx, core.WithTTL(ttl))
			}},
		{"write hold",
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.RWMutex("rw").TryLock(ctx, core.WithTTL(ttl))
			},
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.RWMutex("rw").TryRLock(ctx, core.WithTTL(ttl))
			}},
		{"leadership",
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.Campaign(ctx, "leader", "a", core.WithTTL(ttl))
			},
			func(ctx context.Context, c *core.Client) (*core.Lock, error) {
				return c.TryLock(ctx, "leader", core.WithTTL(ttl), core.WithMetadata("b"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			srv := redistest.StartServer(t)
			fp := startProxy(t, srv.Addr())
			prefix := testPrefix()
			victim := mustNew(core.NewRedis(faultRedis(t, fp.Addr()), core.WithKeyPrefix(prefix)))
			defer victim.Close()
			rival := mustNew(core.NewRedis(faultRedis(t, srv.Addr()), core.WithKeyPrefix(prefix)))
			defer rival.Close()
			ctx := ctxFor(t, 20*time.Second)
			h, err := tc.hold(ctx, victim)
			if err != nil {
				t.Fatal(err)
			}
			var lostAt atomic.Pointer[time.Time]
			go func() {
				<-h.Lost()
				now := time.Now()
				lostAt.Store(&now)
			}()
			undo := fp.blackhole(up)
			defer undo()
			var taken time.Time
			var got *core.Lock
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if got, err = tc.take(ctx, rival); err == nil {
					taken = time.Now()
					break
				}
			}
			if got == nil {
				t.Fatalf("the rival never took the place: %v", err)
			}
			defer got.Release(ctx)
			select {
			case <-h.Lost():
			case <-time.After(time.Second):
				t.Fatal("the rival took the place and the cut-off holder was not told")
			}
			for lostAt.Load() == nil {
				time.Sleep(time.Millisecond)
			}
			if at := *lostAt.Load(); at.After(taken.Add(slack)) {
				t.Fatalf("the holder was told %v after the rival took its place", at.Sub(taken))
			} else {
				t.Logf("told %v before the rival took its place: %v", taken.Sub(at).Round(time.Millisecond), h.Err())
			}
		})
	}
}
