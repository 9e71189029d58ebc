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

// TestRWMutexHolds: readers share, a writer excludes everyone, fences rise
// with writes and readers carry the current one.
func TestRWMutexHolds(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		a, b := newClient(), newClient()
		defer a.Close()
		defer b.Close()
		ctx := ctxFor(t, 20*time.Second)
		w1, err := a.RWMutex("doc").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.RWMutex("doc").TryRLock(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("read while written: %v", err)
		}
		if _, err := b.RWMutex("doc").TryLock(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("second writer: %v", err)
		}
		w1.Release(ctx)
		r1, err := a.RWMutex("doc").TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := b.RWMutex("doc").TryRLock(ctx, core.WithMetadata("report"))
		if err != nil {
			t.Fatalf("second reader: %v", err)
		}
		if r1.Fence() != w1.Fence() || r2.Fence() != w1.Fence() {
			t.Fatalf("readers' fences %d %d, want the last write's %d", r1.Fence(), r2.Fence(), w1.Fence())
		}
		if _, err := b.RWMutex("doc").TryLock(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("writer while read: %v", err)
		}
		if m, err := b.TryLock(ctx, "doc"); err != nil { // the key's mutex is another thing
			t.Fatalf("mutex of the key: %v", err)
		} else {
			m.Release(ctx)
		}
		r1.Release(ctx)
		r2.Release(ctx)
		w2, err := b.RWMutex("doc").TryLock(ctx)
		if err != nil {
			t.Fatalf("writer after the readers: %v", err)
		}
		if w2.Fence() <= w1.Fence() {
			t.Fatalf("write fence %d after %d", w2.Fence(), w1.Fence())
		}
		w2.Release(ctx)
	})
}

// TestRWMutexWriterNotStarved: readers on other Clients that keep the lock
// read at every moment do not keep a writer out: new readers queue behind
// it, and it gets in once those inside leave. Readers and the writer never
// overlap.
func TestRWMutexWriterNotStarved(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		ctx, cancel := context.WithCancel(ctxFor(t, 30*time.Second))
		var readers, writing atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			c := newClient()
			defer c.Close()
			wg.Go(func() {
				for ctx.Err() == nil {
					r, err := c.RWMutex("feed").RLock(ctx, core.WithWaitTimeout(10*time.Second))
					if err != nil {
						if ctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					readers.Add(1)
					if writing.Load() != 0 {
						t.Error("a reader inside with the writer")
					}
					time.Sleep(10 * time.Millisecond)
					readers.Add(-1)
					r.Release(context.Background())
				}
			})
		}
		time.Sleep(50 * time.Millisecond) // the readers overlap from now on
		wc := newClient()
		defer wc.Close()
		for i := range 3 {
			w, err := wc.RWMutex("feed").Lock(ctx, core.WithWaitTimeout(5*time.Second))
			if err != nil {
				t.Fatalf("writer %d starved: %v", i, err)
			}
			writing.Store(1)
			if n := readers.Load(); n != 0 {
				t.Errorf("writer inside with %d readers", n)
			}
			time.Sleep(5 * time.Millisecond)
			writing.Store(0)
			w.Release(ctx)
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		wg.Wait()
	})
}

// TestRWMutexWriterGivesUp: a writer that stops waiting stops holding
// readers back.
func TestRWMutexWriterGivesUp(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		r, err := c.RWMutex("cfg").TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RWMutex("cfg").Lock(ctx, core.WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("writer behind a reader: %v", err)
		}
		r2, err := c.RWMutex("cfg").TryRLock(ctx)
		if err != nil {
			t.Fatalf("reader after the writer gave up: %v", err)
		}
		r.Release(ctx)
		r2.Release(ctx)
	})
}

// TestRWMutexInvalid: WithFair and Redlock are refused.
func TestRWMutexInvalid(t *testing.T) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	ctx := context.Background()
	if _, err := c.RWMutex("k").TryLock(ctx, core.WithFair()); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("WithFair: %v", err)
	}
	if _, err := c.RWMutex("").RLock(ctx); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	_, rdb := redistest.Miniredis(t, false)
	rl := mustNew(core.NewRedlock([]redis.UniversalClient{rdb}))
	defer rl.Close()
	if _, err := rl.RWMutex("k").TryRLock(ctx); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("Redlock: %v", err)
	}
}
