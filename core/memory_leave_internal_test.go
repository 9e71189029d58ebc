package core

import (
	"context"
	"testing"
	"time"
)

// The memory backend's leave (queueLeaver) takes a waiter out of the
// queue and passes on a grant to it not claimed yet, and leaves a lease,
// hold or permit of its token as it is — unlike release.
func TestMemoryLeave(t *testing.T) {
	c := mustNew(NewMemory())
	defer c.Close()
	m := c.be.(*memoryBackend)
	ctx := context.Background()
	acq := func(n names, tok string) acquireResult {
		t.Helper()
		r, err := m.acquire(ctx, n, tok, tok, time.Minute, true, true)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	leave := func(n names, tok string) {
		t.Helper()
		if err := m.leave(ctx, n, tok); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(n names) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		ml, ok := m.live(n.lease, time.Now())
		if !ok {
			return "<free>"
		}
		return ml.value
	}
	queued := func(n names) []string {
		m.mu.Lock()
		defer m.mu.Unlock()
		if q := m.queues[n.queue]; q != nil {
			return append([]string(nil), q.order...)
		}
		return nil
	}

	t.Run("mutex", func(t *testing.T) {
		n := c.names("mutex")
		if !acq(n, "h").acquired || acq(n, "a").acquired || acq(n, "b").acquired {
			t.Fatal("want h to hold, a and b to queue")
		}
		if _, err := m.release(ctx, n, "h"); err != nil {
			t.Fatal(err)
		}
		if got := lease(n); got != "a|" {
			t.Fatalf("after h's release: lease %q, want a grant to a", got)
		}
		leave(n, "a") // a gives up before it claims: the grant passes to b
		if got, q := lease(n), queued(n); got != "b|" || len(q) != 0 {
			t.Fatalf("after a left: lease %q, queue %v; want a grant to b, no queue", got, q)
		}
		if r := acq(n, "b"); !r.acquired {
			t.Fatalf("b's claim: %+v", r)
		}
		acq(n, "x")
		leave(n, "b") // b holds (a twin of its token may have claimed): it stays
		if got, q := lease(n), queued(n); got != "b" || len(q) != 1 || q[0] != "x" {
			t.Fatalf("after b's leave: lease %q, queue %v; want b's lease kept, x queued", got, q)
		}
		leave(n, "x")
		if got, q := lease(n), queued(n); got != "b" || len(q) != 0 {
			t.Fatalf("after x's leave: lease %q, queue %v", got, q)
		}
		leave(n, "nobody") // neither queued nor holding: nothing changes
		if got := lease(n); got != "b" {
			t.Fatalf("after a stranger's leave: lease %q", got)
		}
	})

	t.Run("semaphore", func(t *testing.T) {
		n := c.semNames("sem", 1)
		if !acq(n, "p").acquired || acq(n, "q").acquired {
			t.Fatal("want p to hold the permit, q to queue")
		}
		leave(n, "p")
		leave(n, "q")
		m.mu.Lock()
		_, held := m.permits(n, time.Now())["p"]
		m.mu.Unlock()
		if !held || len(queued(n)) != 0 {
			t.Fatalf("after the leaves: p holds %v, queue %v; want p's permit kept, no queue", held, queued(n))
		}
	})

	t.Run("rwmutex", func(t *testing.T) {
		n := c.kindNames("rw", rwWrite)
		if !acq(n, "w1").acquired || acq(n, "w2").acquired {
			t.Fatal("want w1 to hold, w2 to wait")
		}
		leave(n, "w1")
		leave(n, "w2")
		if got, q := lease(n), queued(n); got != "w1" || len(q) != 0 {
			t.Fatalf("after the leaves: hold %q, writers waiting %v; want w1's hold kept, none waiting", got, q)
		}
	})
}
