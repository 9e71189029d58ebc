package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// skipUnlessPrimitives skips a test of the semaphore and read-write lock
// on a backend that has neither (Redlock), saying so.
func skipUnlessPrimitives(t *testing.T, c *core.Client, _ string) {
	t.Helper()
	skipUnless(t, c, core.CapPrimitives, "semaphores and read-write locks")
}

// testSemaphoreLimit: concurrent holders never exceed the limit, every one
// gets its turn, and each permit has its own, rising fence.
func testSemaphoreLimit(t *testing.T, c *core.Client, key string) {
	skipUnlessPrimitives(t, c, key)
	const limit, workers, rounds = 3, 8, 4
	sem := c.Semaphore(key, limit)
	var inside, most atomic.Int64
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				err := sem.Do(ctxT(t), func(ctx context.Context) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					f, _ := core.FenceFromContext(ctx)
					mu.Lock()
					if seen[f] {
						t.Errorf("fence %d handed out twice", f)
					}
					seen[f] = true
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					return nil
				}, core.WithWaitTimeout(20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > limit || m < 2 {
		t.Errorf("up to %d permits held at once, want 2 to %d", m, limit)
	}
	if _, err := c.Semaphore(key, 0).TryAcquire(ctxT(t)); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("limit 0: %v, want ErrInvalidOption", err)
	}
}

// testSemaphorePermitExpires: a permit that is not renewed comes back at
// its TTL, and its holder is told.
func testSemaphorePermitExpires(t *testing.T, c *core.Client, key string) {
	skipUnlessPrimitives(t, c, key)
	sem := c.Semaphore(key, 1)
	dead, err := sem.TryAcquire(ctxT(t), core.WithTTL(300*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctxT(t)); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("second permit of one: %v, want ErrNotAcquired", err)
	}
	select {
	case <-dead.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder of an expired permit was not told")
	}
	l, err := sem.Acquire(ctxT(t), core.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("the expired permit did not come back: %v", err)
	}
	if l.Fence() <= dead.Fence() {
		t.Errorf("fence %d after %d", l.Fence(), dead.Fence())
	}
	mustRelease(t, l)
}

// testRWMutex: readers share, a writer excludes readers and writers, a
// waiting writer holds new readers back, a write raises the fence.
func testRWMutex(t *testing.T, c *core.Client, key string) {
	skipUnlessPrimitives(t, c, key)
	rw := c.RWMutex(key)
	r1, err := rw.TryRLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.TryRLock(ctxT(t))
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := rw.TryLock(ctxT(t)); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("writer while read: %v", err)
	}
	got := make(chan *core.Lock, 1)
	go func() {
		w, err := rw.Lock(ctxT(t), core.WithWaitTimeout(10*time.Second))
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		got <- w
	}()
	deadline := time.Now().Add(5 * time.Second)
	for { // until the writer is recorded and holds new readers back
		l, err := rw.TryRLock(ctxT(t))
		if errors.Is(err, core.ErrNotAcquired) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		mustRelease(t, l)
		if time.Now().After(deadline) {
			t.Fatal("new readers are still let in while a writer waits")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustRelease(t, r1)
	mustRelease(t, r2)
	w := <-got
	if w == nil {
		return
	}
	if w.Fence() <= r1.Fence() {
		t.Errorf("write fence %d not above the readers' %d", w.Fence(), r1.Fence())
	}
	if _, err := rw.TryRLock(ctxT(t)); !errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("reader while written: %v", err)
	}
	mustRelease(t, w)
	r3, err := rw.TryRLock(ctxT(t))
	if err != nil {
		t.Fatalf("reader after the write: %v", err)
	}
	r4, err := rw.TryRLock(ctxT(t))
	if err != nil {
		t.Fatalf("second reader after the write: %v", err)
	}
	if r3.Fence() <= w.Fence() || r4.Fence() != r3.Fence() {
		t.Errorf("readers' fences %d %d, want one fence above the last write's %d (a writer deposed by readers is fenced out)", r3.Fence(), r4.Fence(), w.Fence())
	}
	mustRelease(t, r3)
	mustRelease(t, r4)
}

// testCampaignObserve: campaigners lead one at a time, and an observer
// sees each leader and the gaps.
func testCampaignObserve(t *testing.T, c *core.Client, key string) {
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	infos := c.Observe(ctx, key)
	next := func() core.Info {
		t.Helper()
		select {
		case info := <-infos:
			return info
		case <-time.After(10 * time.Second):
			t.Fatal("nothing observed")
			return core.Info{}
		}
	}
	if info := next(); info.Held {
		t.Fatalf("a leader before any campaign: %+v", info)
	}
	for _, who := range []string{"a", "b"} {
		lead, err := c.Campaign(ctx, key, who)
		if err != nil {
			t.Fatal(err)
		}
		if info := next(); info.Token != lead.Token() || info.Metadata != who {
			t.Fatalf("observed %+v, want leader %s", info, who)
		}
		time.Sleep(20 * time.Millisecond)
		mustRelease(t, lead)
		if info := next(); info.Held {
			t.Fatalf("observed %+v after the resignation", info)
		}
	}
}

// testLockAll: all or nothing, in any order.
func testLockAll(t *testing.T, c *core.Client, key string) {
	keys := []string{key + ":c", key + ":a", key + ":b"}
	held := mustLock(t, c, key+":b")
	if _, err := c.TryLockAll(ctxT(t), keys); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryLockAll with one key held: %v", err)
	}
	for _, k := range []string{key + ":a", key + ":c"} {
		mustRelease(t, mustLock(t, c, k)) // given back
	}
	mustRelease(t, held)
	var wg sync.WaitGroup
	for i := range 3 {
		order := []string{keys[i%3], keys[(i+1)%3], keys[(i+2)%3]}
		wg.Go(func() {
			for range 5 {
				g, err := c.LockAll(ctxT(t), order, core.WithWaitTimeout(20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				if err := g.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// testSemaphoreFair: with WithFair, waiters get permits in arrival order,
// and nobody takes a free permit ahead of a queued waiter — not even a
// caller that counts against a larger limit and so sees one free.
func testSemaphoreFair(t *testing.T, c *core.Client, key string) {
	skipUnlessPrimitives(t, c, key)
	const waiters = 3
	ctx := ctxT(t)
	held, err := c.Semaphore(key, 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			p, err := c.Semaphore(key, 1).Acquire(ctx, core.WithFair(), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mustRelease(t, p)
		})
		waitFor(t, fmt.Sprintf("%d permit waiters queued", i+1), func() bool {
			info, err := c.Inspect(ctx, key)
			return err == nil && info.PermitWaiters == i+1
		})
	}
	if _, err := c.Semaphore(key, 2).TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("a caller ahead of the queue: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, held)
	wg.Wait()
	if len(order) != waiters || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("permits went in order %v, want [0 1 2]", order)
	}
}
