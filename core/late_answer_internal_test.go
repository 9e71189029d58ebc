package core

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lateAll answers LockAll's one-step acquisitions delay after they were
// made, as through a stalled connection.
type lateAll struct {
	backend
	aa    allAcquirer
	delay time.Duration
}

func (b lateAll) canAcquireAll(ns []names) bool { return b.aa.canAcquireAll(ns) }

func (b lateAll) acquireAll(ctx context.Context, ns []names, values []string, ttl time.Duration) (allResult, error) {
	r, err := b.aa.acquireAll(ctx, ns, values, ttl)
	time.Sleep(b.delay)
	return r, err
}

// TryLockAll, like TryLock (TestAnswerAfterTTLIsNoLease), makes no locks
// of an answer that came after their TTL ran out, and gives the leases
// back.
func TestLockAllAnswerAfterTTL(t *testing.T) {
	c := mustNew(NewMemory())
	defer c.Close()
	c.be = lateAll{backend: c.be, aa: c.be.(allAcquirer), delay: 300 * time.Millisecond}
	ctx := context.Background()
	g, err := c.TryLockAll(ctx, []string{"a", "b"}, WithTTL(200*time.Millisecond))
	if err == nil {
		t.Fatalf("got a group (%d locks) from an answer past its TTL", len(g.Locks()))
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, k := range []string{"a", "b"} {
		for {
			info, err := c.Inspect(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Held {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is still held", k)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
