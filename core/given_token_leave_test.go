package core_test

import (
	"context"
	"errors"
	"sync"
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

// fairMap is mapBackend with CapFair: a caller refused under Enqueue is
// told it queued (the map keeps no queue: enough to make the Client take
// its leave). It counts the Releases and Leaves of each token.
type fairMap struct {
	*mapBackend
	mu       sync.Mutex
	released map[string]int
	left     map[string]int
}

func (f *fairMap) Capabilities() core.Capability { return core.CapFair }

func (f *fairMap) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	r, err := f.mapBackend.Acquire(ctx, req)
	if err == nil && !r.Acquired && req.Enqueue {
		r.Queued = true
	}
	return r, err
}

func (f *fairMap) Release(ctx context.Context, key, token string) (bool, error) {
	f.mu.Lock()
	f.released[token]++
	f.mu.Unlock()
	return f.mapBackend.Release(ctx, key, token)
}

// fairLeaver is fairMap with QueueLeaver.
type fairLeaver struct{ *fairMap }

func (f fairLeaver) Leave(_ context.Context, key, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left[token]++
	return nil
}

// A fair waiter under a caller's token that gives up leaves the queue
// with QueueLeaver's Leave on a backend that has it, and releases nothing:
// a lease of the token there may be another process's. On one without
// it, Release of the token is still how it leaves the queue (the Backend
// contract); under a token of the Client's own it releases, as before.
func TestGivenTokenWaiterLeavesWithQueueLeaver(t *testing.T) {
	for _, tc := range []struct {
		name          string
		leaver, given bool
		wantLeave     bool
	}{
		{"QueueLeaver, caller's token", true, true, true},
		{"QueueLeaver, own token", true, false, false},
		{"no QueueLeaver, caller's token", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fm := &fairMap{mapBackend: newMapBackend(), released: map[string]int{}, left: map[string]int{}}
			var b core.Backend = fm
			if tc.leaver {
				b = fairLeaver{fm}
			}
			c, err := core.New(b)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			h, err := c.TryLock(ctx, "k", core.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			opts := []core.LockOption{core.WithFair(), core.WithWaitTimeout(50 * time.Millisecond)}
			if tc.given {
				opts = append(opts, core.WithToken("job-t"))
			}
			if _, err := c.Lock(ctx, "k", opts...); !errors.Is(err, core.ErrNotAcquired) {
				t.Fatalf("Lock: %v, want ErrNotAcquired", err)
			}
			fm.mu.Lock()
			defer fm.mu.Unlock()
			leaves, releases := 0, 0
			for tok, n := range fm.left {
				leaves += n
				if tc.given && tok != "job-t" {
					t.Errorf("Leave of token %q", tok)
				}
			}
			for tok, n := range fm.released {
				if tok != h.Token() {
					releases += n
				}
			}
			if tc.wantLeave && (leaves != 1 || releases != 0) {
				t.Fatalf("Leaves %d, Releases %d: want the waiter to leave once and release nothing", leaves, releases)
			}
			if !tc.wantLeave && (leaves != 0 || releases != 1) {
				t.Fatalf("Leaves %d, Releases %d: want the waiter to release once", leaves, releases)
			}
		})
	}
}
