package core_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// TestSemaphoreFair: with WithFair, waiters on separate Clients get their
// permits in arrival order, and a newcomer does not take a freed permit
// while waiters queue — not even a TryAcquire without WithFair.
func TestSemaphoreFair(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		const limit, waiters = 2, 5
		ctx := ctxFor(t, 30*time.Second)
		holder := newClient()
		defer holder.Close()
		sem := holder.Semaphore("fifo", limit)
		var held []*core.Lock
		for range limit {
			p, err := sem.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, p)
		}

		var mu sync.Mutex
		var order []int
		got := make(chan *core.Lock, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			c := newClient()
			defer c.Close()
			wg.Go(func() {
				p, err := c.Semaphore("fifo", limit).Acquire(ctx, core.WithFair(), core.WithWaitTimeout(20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				got <- p
			})
			// Each waiter is queued before the next one starts.
			waitUntil(t, fmt.Sprintf("waiter %d queued", i), func() bool {
				info, err := holder.Inspect(ctx, "fifo")
				return err == nil && info.PermitWaiters == i+1
			})
		}

		// A free permit goes to the queue's first waiters, never to a
		// newcomer, fair or not. (The newcomer counts against a larger
		// limit, so it sees a permit free that the waiters do not: the
		// queue alone stops it.)
		newcomer := newClient()
		defer newcomer.Close()
		if _, err := newcomer.Semaphore("fifo", limit+1).TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("a newcomer with a permit free but waiters queued: %v, want ErrNotAcquired", err)
		}
		held[0].Release(ctx)
		first := <-got
		first.Release(ctx)
		for range waiters - 1 {
			p := <-got
			p.Release(ctx)
		}
		held[1].Release(ctx)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(order) != "[0 1 2 3 4]" {
			t.Errorf("permits went in order %v, want arrival order [0 1 2 3 4]", order)
		}
		if _, err := newcomer.Semaphore("fifo", limit).TryAcquire(ctx); err != nil {
			t.Errorf("a newcomer once the queue drained: %v", err)
		}
	})
}

// TestSemaphoreFairWaiterGivesUp: a queued waiter that gives up (its wait
// bound ran out) leaves the queue, so those behind it are served; a queued
// waiter that died (stopped refreshing its entry) is skipped once its entry
// expires.
func TestSemaphoreFairWaiterGivesUp(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		ctx := ctxFor(t, 30*time.Second)
		a, b, c := newClient(), newClient(), newClient()
		defer a.Close()
		defer b.Close()
		defer c.Close()
		p, err := a.Semaphore("gives-up", 1).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Semaphore("gives-up", 1).Acquire(ctx, core.WithFair(), core.WithWaitTimeout(150*time.Millisecond)); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("b: %v, want ErrNotAcquired after its wait bound", err)
		}
		info, err := a.Inspect(ctx, "gives-up")
		if err != nil {
			t.Fatal(err)
		}
		if info.PermitWaiters != 0 {
			t.Errorf("%d waiters queued after b gave up, want 0", info.PermitWaiters)
		}
		done := make(chan error, 1)
		go func() {
			q, err := c.Semaphore("gives-up", 1).Acquire(ctx, core.WithFair(), core.WithWaitTimeout(10*time.Second))
			if err == nil {
				err = q.Release(ctx)
			}
			done <- err
		}()
		waitUntil(t, "c queued", func() bool {
			info, err := a.Inspect(ctx, "gives-up")
			return err == nil && info.PermitWaiters == 1
		})
		p.Release(ctx)
		if err := <-done; err != nil {
			t.Fatalf("c behind a waiter that gave up: %v", err)
		}
	})
}

// waitUntil polls cond every 5 ms for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestSemaphoreWaiterQueuesWhenStarving: without WithFair, a waiter that
// has waited past the starvation threshold queues (as Info.PermitWaiters
// shows), and from then on no newcomer takes a permit ahead of it.
func TestSemaphoreWaiterQueuesWhenStarving(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		ctx := ctxFor(t, 30*time.Second)
		a, b, c := newClient(), newClient(), newClient()
		defer a.Close()
		defer b.Close()
		defer c.Close()
		// A short TTL, renewed: the waiter retries at least this often.
		p, err := a.Semaphore("starving", 1).TryAcquire(ctx, core.WithTTL(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			q, err := b.Semaphore("starving", 1).Acquire(ctx, core.WithWaitTimeout(20*time.Second))
			if err == nil {
				err = q.Release(ctx)
			}
			done <- err
		}()
		waitUntil(t, "the starving waiter queued", func() bool {
			info, err := a.Inspect(ctx, "starving")
			return err == nil && info.PermitWaiters == 1
		})
		// A newcomer that sees a permit free (a larger limit) is still
		// refused: the queued waiter comes first.
		if _, err := c.Semaphore("starving", 2).TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("a newcomer ahead of a queued waiter: %v, want ErrNotAcquired", err)
		}
		p.Release(ctx)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
