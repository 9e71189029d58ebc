package locktest

// Waiting, re-entry and fair mode.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

func testWaitWokenByRelease(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key, core.WithTTL(time.Minute))
	got := make(chan error, 1)
	go func() {
		// The holder's lease lasts a minute and a waiter's fallback timer is
		// seconds long: only the release notification can wake it in time.
		l, err := c.Lock(ctxT(t), key, core.WithWaitTimeout(3*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	mustRelease(t, a)
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func testWaitBounded(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key)
	defer mustRelease(t, a)

	_, err := c.Lock(ctxT(t), key, core.WithWaitTimeout(100*time.Millisecond))
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WithWaitTimeout: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, key)
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = c.Lock(ctx, key)
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("ctx cancel: got %v, want ErrNotAcquired and Canceled", err)
	}
	_, err = c.Lock(ctxT(t), key, core.WithRetryBudget(1))
	if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("retry budget: got %v, want ErrNotAcquired", err)
	}
	err = c.Do(ctxT(t), key, func(context.Context) error { return nil }, core.WithRetryBudget(0))
	if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("Do with budget 0: got %v, want ErrNotAcquired", err)
	}
}

func testReentrancy(t *testing.T, c *core.Client, key string) {
	err := c.Do(ctxT(t), key, func(ctx context.Context) error {
		inner, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("nested TryLock: %v", err)
		}
		info, _ := c.Inspect(ctx, key)
		if inner.Token() != info.Token {
			t.Fatalf("nested handle does not share the lease")
		}
		nested, err := c.Lock(ctx, key)
		if err != nil || nested.Fence() != inner.Fence() {
			t.Fatalf("nested Lock: %v (fence %d, want %d)", err, nested.Fence(), inner.Fence())
		}
		mustRelease(t, nested)
		mustRelease(t, inner)
		assertHeldElsewhere(t, c, key) // the outer hold survives
		return c.Do(ctx, key, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	// Lock.WithContext does the same outside Do.
	l := mustLock(t, c, key)
	again, err := c.TryLock(l.WithContext(context.Background()), key)
	if err != nil {
		t.Fatalf("TryLock with Lock.WithContext: %v", err)
	}
	mustRelease(t, again)
	assertHeldElsewhere(t, c, key)
	mustRelease(t, l)
	mustRelease(t, mustLock(t, c, key))
}

func testTokenReentry(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key, core.WithTTL(time.Minute))
	b := mustLock(t, c, key, core.WithToken(a.Token()))
	// Redlock may report a higher fence for the re-entered lease (the
	// highest counter of the nodes that answered); never a lower one.
	if b.Fence() < a.Fence() || b.Token() != a.Token() {
		t.Fatalf("re-entry by token: fence %d token %q, want %d %q", b.Fence(), b.Token(), a.Fence(), a.Token())
	}
	mustRelease(t, b)
	mustRelease(t, mustLock(t, c, key)) // the shared lease is gone
	_, err := c.TryLock(ctxT(t), key, core.WithToken("chosen-token"))
	if err != nil {
		t.Fatalf("a free key with a chosen token: %v", err)
	}
}

func testFairOrder(t *testing.T, c *core.Client, key string) {
	skipUnlessFair(t, c, key)
	const waiters = 6
	holder := mustLock(t, c, key, core.WithFair(), core.WithTTL(time.Minute))
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctxT(t), key, core.WithFair(), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			l.Release(context.Background())
		}()
		WaitWaiters(t, c, key, i+1) // arrival order is known
	}
	// TryLock in fair mode does not jump the queue, and does not join it.
	if _, err := c.TryLock(ctxT(t), key, core.WithFair()); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("fair TryLock on a queued key: %v", err)
	}
	mustRelease(t, holder)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want arrival order", order)
		}
	}
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters acquired", len(order), waiters)
	}
	info, _ := c.Inspect(ctxT(t), key)
	if info.Held || info.Waiters != 0 {
		t.Fatalf("after the queue drained: %+v", info)
	}
}

func testFairGiveUp(t *testing.T, c *core.Client, key string) {
	skipUnlessFair(t, c, key)
	holder := mustLock(t, c, key, core.WithFair(), core.WithTTL(time.Minute))
	quitter := make(chan error, 1)
	quit, giveUp := context.WithCancel(ctxT(t))
	go func() {
		_, err := c.Lock(quit, key, core.WithFair())
		quitter <- err
	}()
	WaitWaiters(t, c, key, 1)
	got := make(chan error, 1)
	go func() {
		// The grant must come by notification: the fallback poll of a fair
		// waiter is 0.8-1 s, past this timeout.
		l, err := c.Lock(ctxT(t), key, core.WithFair(), core.WithWaitTimeout(700*time.Millisecond))
		if err == nil {
			l.Release(context.Background())
		}
		got <- err
	}()
	WaitWaiters(t, c, key, 2)
	giveUp()
	if err := <-quitter; !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("quitter: %v", err)
	}
	WaitWaiters(t, c, key, 1) // it left the queue
	mustRelease(t, holder)
	if err := <-got; err != nil {
		t.Fatalf("second waiter after the first gave up: %v", err)
	}
}
