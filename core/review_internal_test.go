package core

// Regression tests of internals, from the adversarial review of the
// per-lease deadlines. Each failed before its fix.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// pauseAfterAcquire wraps a backend: after the real acquisition succeeds,
// it lets Client.Close start (in another goroutine) before it returns, as
// if the caller had been descheduled at that moment.
type pauseAfterAcquire struct {
	backend
	c    *Client
	once sync.Once
	done chan struct{}
}

func (b *pauseAfterAcquire) acquire(ctx context.Context, n names, token, value string, ttl time.Duration, fair, enqueue bool) (acquireResult, error) {
	r, err := b.backend.acquire(ctx, n, token, value, ttl, fair, enqueue)
	if err == nil && r.acquired {
		b.once.Do(func() {
			go func() { b.c.Close(); close(b.done) }()
			// Close has begun when it stops new attempts.
			for {
				select {
				case <-b.c.done:
					return
				default:
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	return r, err
}

// A Redlock acquisition racing Close leaves no lease on any node: either
// it returns a lease that Close then releases, or ErrClosed and nothing.
func TestReviewAcquireRacingCloseLeavesNothing(t *testing.T) {
	var raw []*redis.Client
	var nodes []redis.UniversalClient
	for range 3 {
		_, rdb := redistest.Miniredis(t, true)
		nodes = append(nodes, rdb)
		raw = append(raw, rdb)
	}
	c := mustNew(NewRedlock(nodes, WithKeyPrefix("pz")))
	p := &pauseAfterAcquire{backend: c.be, c: c, done: make(chan struct{})}
	c.be = p
	l, err := c.TryLock(context.Background(), "k", WithTTL(time.Minute))
	<-p.done
	if err == nil {
		select {
		case <-l.Lost():
		default:
			t.Errorf("a lease taken while Close ran was not reported lost")
		}
	}
	for i, r := range raw {
		if v, _ := r.Exists(context.Background(), "pz:{k}").Result(); v == 1 {
			t.Errorf("node %d holds the lease after TryLock (%v) and Close", i, err)
		}
	}
}

// Nested Do calls do not pile callbacks up on the lease.
func TestReviewNestedDoLeavesNoCallbacks(t *testing.T) {
	c := mustNew(NewMemory())
	defer c.Close()
	ctx := context.Background()
	c.Do(ctx, "k", func(ctx context.Context) error {
		for range 1000 {
			c.Do(ctx, "k", func(ctx context.Context) error { return nil })
		}
		b, _ := ctx.Value(bindKey{}).(*binding)
		b.l.mu.Lock()
		n := len(b.l.onLost)
		b.l.mu.Unlock()
		if n > 1 {
			t.Errorf("after 1000 finished nested Do calls the lease keeps %d loss callbacks", n)
		}
		return nil
	})
}

// A TTL with a fraction of a millisecond is counted in whole milliseconds,
// as Redis counts it, so the deadline is never past the server's expiry.
func TestTTLTruncated(t *testing.T) {
	c := mustNew(NewMemory())
	defer c.Close()
	h, err := c.TryLock(context.Background(), "k", WithTTL(30*time.Millisecond+990*time.Microsecond), WithDriftMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ttl != 30*time.Millisecond || l.deadline.After(l.start.Add(30*time.Millisecond)) {
		t.Fatalf("ttl %v, deadline %v after start: want 30ms and no later", l.ttl, l.deadline.Sub(l.start))
	}
}
