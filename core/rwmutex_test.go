package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRWMutexHolds: readers share, a writer excludes everyone, fences rise
// with writes and with each read term, whose readers share its fence.
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
		if r1.Fence() <= w1.Fence() || r2.Fence() != r1.Fence() {
			t.Fatalf("readers' fences %d %d, want one fence above the last write's %d", r1.Fence(), r2.Fence(), w1.Fence())
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
		if w2.Fence() <= r1.Fence() {
			t.Fatalf("write fence %d after the readers' %d", w2.Fence(), r1.Fence())
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

// TestInspectPrimitives: Inspect tells every holder of a key — its mutex,
// its semaphore's permits, its read-write lock's holds — and how many
// writers wait.
func TestInspectPrimitives(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		m, _ := c.TryLock(ctx, "k", core.WithMetadata("mutex"))
		p1, _ := c.Semaphore("k", 3).TryAcquire(ctx, core.WithMetadata("job 1"), core.WithTTL(10*time.Second))
		p2, _ := c.Semaphore("k", 3).TryAcquire(ctx, core.WithMetadata("job 2"), core.WithTTL(20*time.Second))
		r, _ := c.RWMutex("k").TryRLock(ctx, core.WithMetadata("reader"))
		if m == nil || p1 == nil || p2 == nil || r == nil {
			t.Fatal("setup failed")
		}
		waited := make(chan error, 1)
		go func() {
			_, err := c.RWMutex("k").Lock(ctx, core.WithWaitTimeout(300*time.Millisecond))
			waited <- err
		}()
		var info core.Info
		for range 200 { // until the writer is recorded as waiting
			var err error
			if info, err = c.Inspect(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if info.WritersWaiting == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if !info.Held || info.Metadata != "mutex" || info.WritersWaiting != 1 {
			t.Fatalf("Inspect: %+v", info)
		}
		var got []string
		for _, h := range info.Holds {
			got = append(got, fmt.Sprintf("%s:%s:%d", h.Kind, h.Metadata, h.Fence))
			if h.TTL <= 0 || h.Token == "" {
				t.Errorf("hold %+v", h)
			}
		}
		want := []string{
			fmt.Sprintf("permit:job 1:%d", p1.Fence()), fmt.Sprintf("permit:job 2:%d", p2.Fence()),
			fmt.Sprintf("read:reader:%d", r.Fence()),
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("holds %v, want %v", got, want)
		}
		if err := <-waited; !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("writer: %v", err)
		}
		r.Release(ctx)
		w, err := c.RWMutex("k").TryLock(ctx, core.WithMetadata("writer"))
		if err != nil {
			t.Fatal(err)
		}
		info, _ = c.Inspect(ctx, "k")
		if n := len(info.Holds); n != 3 || info.Holds[2].Kind != "write" || info.Holds[2].Metadata != "writer" || info.Holds[2].Fence != w.Fence() {
			t.Fatalf("holds with a writer: %+v", info.Holds)
		}
		for _, l := range []*core.Lock{m, p1, p2, w} {
			l.Release(ctx)
		}
		if info, _ = c.Inspect(ctx, "k"); info.Held || len(info.Holds) != 0 || info.WritersWaiting != 0 {
			t.Fatalf("after every release: %+v", info)
		}
	})
}

// TestRWMutexWaitingReadersShare: readers waiting in one Client behind a
// writer all get in when it releases — one release wakes one waiter per
// Client, and a reader that gets in wakes the next — rather than one per
// release (each would then wait for the one before it to finish).
func TestRWMutexWaitingReadersShare(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		const readers = 4
		ctx := ctxFor(t, 30*time.Second)
		c, writer := newClient(), newClient()
		defer c.Close()
		defer writer.Close()
		w, err := writer.RWMutex("shared").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var inside atomic.Int64
		all := make(chan struct{})
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				r, err := c.RWMutex("shared").RLock(ctx, core.WithWaitTimeout(20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				defer r.Release(ctx)
				if inside.Add(1) == readers {
					close(all)
				}
				// Hold on until every reader is in. A reader woken only by
				// the previous one's release would come after the fallback
				// poll instead (4 s or more).
				select {
				case <-all:
				case <-time.After(2 * time.Second):
					t.Errorf("only %d of %d waiting readers got in together", inside.Load(), readers)
				}
			})
		}
		time.Sleep(50 * time.Millisecond) // the readers start waiting (one that does not yet gets in at once)
		w.Release(ctx)
		wg.Wait()
	})
}

// TestRWMutexWritersInArrivalOrder: writers waiting on separate Clients
// get the lock in the order they came, each woken by the release before
// it; a writer that gives up leaves the line without holding it up.
func TestRWMutexWritersInArrivalOrder(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		const writers = 4
		ctx := ctxFor(t, 30*time.Second)
		holder := newClient()
		defer holder.Close()
		first, err := holder.RWMutex("line").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		waiting := func(n int) {
			waitUntil(t, fmt.Sprintf("%d writers waiting", n), func() bool {
				info, err := holder.Inspect(ctx, "line")
				return err == nil && info.WritersWaiting == n
			})
		}
		for i := range writers {
			c := newClient()
			defer c.Close()
			wg.Go(func() {
				w, err := c.RWMutex("line").Lock(ctx, core.WithWaitTimeout(20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				w.Release(ctx)
			})
			waiting(i + 1)
			if i == 1 { // one that gives up, queued between 1 and 2
				quitter := newClient()
				defer quitter.Close()
				go func() {
					_, err := quitter.RWMutex("line").Lock(ctx, core.WithWaitTimeout(100*time.Millisecond))
					if !errors.Is(err, core.ErrNotAcquired) {
						t.Errorf("quitter: %v", err)
					}
				}()
				waiting(i + 2)
				waiting(i + 1)
			}
		}
		first.Release(ctx)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(order) != "[0 1 2 3]" {
			t.Errorf("writers got the lock in order %v, want arrival order [0 1 2 3]", order)
		}
	})
}

// TestRWMutexNoWriterOvertakes: while a writer waits, a newcomer writer
// does not take the free lock ahead of it (the waiting writer is planted
// in Redis, as one whose wake-up is still on its way would be).
func TestRWMutexNoWriterOvertakes(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, rdb redis.UniversalClient) {
		if rdb == nil {
			t.Skip("plants a waiting writer in Redis")
		}
		ctx := ctxFor(t, 10*time.Second)
		c := newClient()
		defer c.Close()
		w, err := c.RWMutex("overtake").TryLock(ctx) // leaves its fence counter: the names' prefix
		if err != nil {
			t.Fatal(err)
		}
		w.Release(ctx)
		base := strings.TrimSuffix(findKey(t, rdb, "*{overtake}:rw:fence"), ":fence")
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		due := now.Add(5 * time.Second).UnixMilli()
		rdb.ZAdd(ctx, base+":q", redis.Z{Score: float64(due), Member: "ghost"})
		rdb.RPush(ctx, base+":qa", "ghost")
		if _, err := c.RWMutex("overtake").TryLock(ctx); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("a newcomer writer with a writer waiting: %v, want ErrNotAcquired", err)
		}
		rdb.Del(ctx, base+":q", base+":qa")
		w, err = c.RWMutex("overtake").TryLock(ctx)
		if err != nil {
			t.Fatalf("once nobody waits: %v", err)
		}
		w.Release(ctx)
	})
}

// findKey returns the one key matching pattern (on every master of a
// Cluster).
func findKey(t *testing.T, rdb redis.UniversalClient, pattern string) string {
	t.Helper()
	var mu sync.Mutex
	var found []string
	scan := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		found = append(found, keys...)
		mu.Unlock()
		return err
	}
	ctx := context.Background()
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	if err != nil || len(found) != 1 {
		t.Fatalf("keys %q: %v %v", pattern, found, err)
	}
	return found[0]
}
