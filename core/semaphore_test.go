package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// semBackends are the clients every semaphore test runs on: memory,
// miniredis, the shared Redis and a three-master Cluster (the last two
// only where servers are present).
func semBackends(t *testing.T, f func(t *testing.T, newClient func() *core.Client, rdb redis.UniversalClient)) {
	t.Run("memory", func(t *testing.T) {
		c := mustNew(core.NewMemory()) // one process: its Clients share it
		defer c.Close()
		f(t, func() *core.Client { return c }, nil)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := redistest.Miniredis(t, true)
		f(t, func() *core.Client { return mustNew(core.NewRedis(rdb)) }, rdb)
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		prefix := redistest.Prefix(t, rdb)
		f(t, func() *core.Client { return mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix))) }, rdb)
	})
	if testing.Short() {
		return
	}
	t.Run("cluster", func(t *testing.T) {
		rdb := redistest.StartCluster(t, 3).Client(t)
		f(t, func() *core.Client { return mustNew(core.NewRedis(rdb)) }, rdb)
	})
}

// TestSemaphoreNeverOverLimit: 12 workers on separate Clients, as separate
// processes would be, never hold more than the limit at once; every one
// gets its turn; fences of the key strictly rise.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		const limit, workers, rounds = 3, 12, 5
		var inside, most, done atomic.Int64
		var mu sync.Mutex
		fences := map[int64]bool{}
		var wg sync.WaitGroup
		for range workers {
			c := newClient()
			defer c.Close()
			sem := c.Semaphore("jobs", limit)
			wg.Go(func() {
				for range rounds {
					err := sem.Do(ctxFor(t, 20*time.Second), func(ctx context.Context) error {
						n := inside.Add(1)
						defer inside.Add(-1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						f, ok := core.FenceFromContext(ctx)
						mu.Lock()
						if !ok || fences[f] {
							t.Errorf("fence %d (%v) handed out twice", f, ok)
						}
						fences[f] = true
						mu.Unlock()
						time.Sleep(2 * time.Millisecond)
						return nil
					}, core.WithTTL(5*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		if m := most.Load(); m > limit || m < 2 {
			t.Errorf("at most %d held at once, want 2 to %d", m, limit)
		}
		if d := done.Load(); d != workers*rounds {
			t.Errorf("%d of %d runs done", d, workers*rounds)
		}
	})
}

// TestSemaphorePermits: a full semaphore answers ErrNotAcquired; a release
// frees one permit and wakes a waiter (within a wait bound shorter than any
// fallback poll); a permit's Extend, Release and stale handle behave as a
// lock's; a mutex of the same key is independent.
func TestSemaphorePermits(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		sem := c.Semaphore("pool", 2)
		a, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sem.TryAcquire(ctx, core.WithMetadata("worker b"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Key() != "pool" || a.Token() == b.Token() || b.Fence() <= a.Fence() {
			t.Fatalf("permits %q %q/%d, %q/%d", a.Key(), a.Token(), a.Fence(), b.Token(), b.Fence())
		}
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("third permit of two: %v, want ErrNotAcquired", err)
		}
		m, err := c.TryLock(ctx, "pool") // the key's mutex is another thing
		if err != nil {
			t.Fatalf("mutex of a semaphore's key: %v", err)
		}
		m.Release(ctx)
		if err := a.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		again, err := sem.TryAcquire(ctx, core.WithToken(a.Token()))
		if err != nil || again.Fence() != a.Fence() {
			t.Fatalf("re-entry with the token: %v, fence %d want %d", err, again.Fence(), a.Fence())
		}
		// again and a share the permit: a's Release below frees it.
		// A waiter is woken by the release: the wait bound (3 s) is below
		// the fallback poll (at least 4 s with permits of 30 s).
		got := make(chan *core.Lock, 1)
		go func() {
			l, err := sem.Acquire(ctx, core.WithWaitTimeout(3*time.Second))
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- l
		}()
		time.Sleep(50 * time.Millisecond)
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		w := <-got
		if w == nil {
			return
		}
		if w.Fence() <= b.Fence() {
			t.Errorf("waiter's fence %d not above %d", w.Fence(), b.Fence())
		}
		if err := a.Release(ctx); err != nil {
			t.Errorf("second Release of a handle: %v, want nil", err)
		}
		if err := again.Release(ctx); !errors.Is(err, core.ErrNotHeld) && !errors.Is(err, core.ErrLost) {
			t.Errorf("Release of the re-entered twin after the permit went: %v", err)
		}
		b.Release(ctx)
		w.Release(ctx)
		if l, err := sem.TryAcquire(ctx); err != nil {
			t.Errorf("after every release: %v", err)
		} else {
			l.Release(ctx)
		}
	})
}

// TestSemaphorePermitExpires: the permit of a holder that stopped renewing
// comes back at its TTL, and the holder is told it lost it.
func TestSemaphorePermitExpires(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		sem := c.Semaphore("slot", 1)
		dead, err := sem.TryAcquire(ctx, core.WithTTL(300*time.Millisecond), core.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-dead.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the expired permit's holder was not told")
		}
		l, err := sem.Acquire(ctx, core.WithWaitTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("the expired permit did not come back: %v", err)
		}
		if l.Fence() <= dead.Fence() {
			t.Errorf("fence %d after %d", l.Fence(), dead.Fence())
		}
		if err := dead.Release(ctx); !errors.Is(err, core.ErrNotHeld) && !errors.Is(err, core.ErrLost) {
			t.Errorf("Release of the expired permit: %v", err)
		}
		l.Release(ctx)
	})
}

// TestSemaphoreLostPermit: a permit that disappears from Redis is reported
// lost, and Do's callback context is cancelled with ErrLost.
func TestSemaphoreLostPermit(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	err := c.Semaphore("evicted", 2).Do(ctx, func(ctx context.Context) error {
		if err := rdb.Del(ctx, prefix+":{evicted}:sem").Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Second):
			return errors.New("not cancelled")
		}
	}, core.WithTTL(600*time.Millisecond))
	if !errors.Is(err, core.ErrLost) {
		t.Fatalf("Do: %v, want ErrLost", err)
	}
}

// TestSemaphoreLimitChanges: lowering the limit lets nobody new in until
// the permits held drop below it; raising it lets more in.
func TestSemaphoreLimitChanges(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		var held []*core.Lock
		for range 3 {
			l, err := c.Semaphore("k", 3).TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		if _, err := c.Semaphore("k", 4).TryAcquire(ctx); err != nil {
			t.Fatalf("raised to 4: %v", err)
		}
		one := c.Semaphore("k", 1)
		for i, l := range held {
			if _, err := one.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("limit 1 with %d held: %v", 4-i, err)
			}
			l.Release(ctx)
		}
	})
}

// TestSemaphoreInvalid: bad limits, WithFair and Redlock are refused.
func TestSemaphoreInvalid(t *testing.T) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"zero limit", errOf(c.Semaphore("k", 0).TryAcquire(ctx)), core.ErrInvalidOption},
		{"huge limit", errOf(c.Semaphore("k", core.MaxSemaphoreLimit+1).Acquire(ctx)), core.ErrInvalidOption},
		{"fair read-write lock", errOf(c.RWMutex("k").TryRLock(ctx, core.WithFair())), core.ErrInvalidOption},
		{"empty key", errOf(c.Semaphore("", 2).TryAcquire(ctx)), core.ErrInvalidKey},
		{"nil func", c.Semaphore("k", 2).Do(ctx, nil), core.ErrInvalidOption},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	_, rdb := redistest.Miniredis(t, false)
	rl := mustNew(core.NewRedlock([]redis.UniversalClient{rdb}))
	defer rl.Close()
	if _, err := rl.Semaphore("k", 2).TryAcquire(ctx); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("Redlock: %v, want ErrInvalidOption", err)
	}
}

// errOf returns a call's error.
func errOf[T any](_ T, err error) error { return err }
