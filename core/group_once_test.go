package core_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scriptCounter is a go-redis hook that counts script calls (EVALSHA and
// EVAL, pipelined or not).
type scriptCounter struct {
	mu sync.Mutex
	n  int
}

func (h *scriptCounter) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if name := strings.ToLower(c.Name()); name == "evalsha" || name == "eval" {
			h.n++
		}
	}
}

func (h *scriptCounter) take() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = 0
	return n
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !redis.HasErrorPrefix(err, "NOSCRIPT") { // the retry with EVAL counts
			h.count(cmd)
		}
		return err
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// TestLockAllOneScript: keys one server stores together (a single server,
// or one Cluster slot) are taken by one script, all or none — a key held
// makes the call take nothing and leaves every fence counter as it was;
// keys in different slots are taken one by one.
func TestLockAllOneScript(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient, prefix string, together, apart []string) {
		hook := &scriptCounter{}
		rdb.AddHook(hook)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		other := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		defer other.Close()
		ctx := ctxFor(t, 20*time.Second)

		hook.take()
		g, err := c.TryLockAll(ctx, together)
		if err != nil {
			t.Fatal(err)
		}
		if n := hook.take(); n != 1 {
			t.Errorf("TryLockAll of %d keys on one server ran %d scripts, want 1", len(together), n)
		}
		first := map[string]int64{}
		for _, l := range g.Locks() {
			first[l.Key()] = l.Fence()
			if _, err := other.TryLock(ctx, l.Key()); !errors.Is(err, core.ErrNotAcquired) {
				t.Errorf("%s while the group holds it: %v", l.Key(), err)
			}
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}

		last := together[len(together)-1]
		held, err := other.TryLock(ctx, last)
		if err != nil {
			t.Fatal(err)
		}
		hook.take()
		if _, err := c.TryLockAll(ctx, together); !errors.Is(err, core.ErrNotAcquired) || !strings.Contains(err.Error(), last) {
			t.Fatalf("TryLockAll with %s held: %v", last, err)
		}
		if n := hook.take(); n != 1 {
			t.Errorf("a refused TryLockAll ran %d scripts, want 1", n)
		}
		for _, k := range together[:len(together)-1] {
			info, err := c.Inspect(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if info.Held || info.Fence != first[k] {
				t.Errorf("%s after a refused TryLockAll: held %v, fence %d (want free, fence %d: nothing taken)", k, info.Held, info.Fence, first[k])
			}
		}
		// LockAll waits key by key once it found one held, and gets all.
		go func() { time.Sleep(50 * time.Millisecond); held.Release(ctx) }()
		g, err = c.LockAll(ctx, together, core.WithWaitTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range g.Locks() {
			if l.Fence() <= first[l.Key()] {
				t.Errorf("%s: fence %d after %d", l.Key(), l.Fence(), first[l.Key()])
			}
		}
		g.Release(ctx)

		if apart != nil {
			hook.take()
			g, err := c.TryLockAll(ctx, apart)
			if err != nil {
				t.Fatal(err)
			}
			if n := hook.take(); n != len(apart) {
				t.Errorf("TryLockAll of %d keys in different slots ran %d scripts, want one each", len(apart), n)
			}
			g.Release(ctx)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := redistest.Miniredis(t, true)
		run(t, rdb, "latchkey", []string{"a", "b", "c"}, nil)
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		run(t, rdb, redistest.Prefix(t, rdb), []string{"a", "b", "c"}, nil)
	})
	if testing.Short() {
		return
	}
	t.Run("cluster", func(t *testing.T) {
		rdb := redistest.StartCluster(t, 3).Client(t)
		// "order7}…" share the hash tag "order7": one slot. "a", "b", "c"
		// are in three slots (15495, 3300, 7365).
		run(t, rdb, "latchkey", []string{"order7}sku1", "order7}sku2", "order7}sku3"}, []string{"a", "b", "c"})
	})
}

// TestLockAllOneScriptObserved: an Observer sees one acquisition per
// member, each with its own fence, and the members' later operations.
func TestLockAllOneScriptObserved(t *testing.T) {
	rec := &recorder{}
	c := mustNew(core.NewMemory(core.WithObserver(rec)))
	defer c.Close()
	ctx := context.Background()
	g, err := c.TryLockAll(ctx, []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	acq := rec.find(core.OpAcquire)
	if len(acq) != 2 || acq[0].Err != nil || acq[1].Err != nil || acq[0].Fence == 0 || acq[1].Fence == 0 {
		t.Fatalf("acquisitions %+v", acq)
	}
	g.Release(ctx)
	if rel := rec.find(core.OpRelease); len(rel) != 2 {
		t.Fatalf("releases %+v", rel)
	}
}
