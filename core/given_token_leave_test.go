package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A fair waiter under a caller's token (WithToken) that gives up leaves
// the queue, and a grant to it not claimed yet is passed on, as WithToken
// promises. A change that made such a waiter release nothing on backends
// that cannot leave a queue alone (784268c, reverted) left it head of the
// in-memory queue: the holder's release granted it the key, which nobody
// claimed, and a fair newcomer waited a second for a free key (review 11).
func TestReview11MemoryGivenWaiterBlocksQueue(t *testing.T) {
	c, err := core.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	h, err := c.TryLock(ctx, "k", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "k", core.WithToken("job-t"), core.WithFair(), core.WithWaitTimeout(100*time.Millisecond)); err == nil {
		t.Fatal("acquired")
	}
	h.Release(ctx)
	start := time.Now()
	l, err := c.TryLock(ctx, "k")
	if err == nil {
		l.Release(ctx)
		return
	}
	l, err = c.Lock(ctx, "k", core.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	t.Fatalf("the key was free, yet a newcomer waited %v: granted to a waiter that gave up (TryLock refused)", time.Since(start))
}
