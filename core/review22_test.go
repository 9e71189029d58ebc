package core_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Evict promises to take "the holds Inspect shows just before it, and only
// those: a hold taken after that look ... is left be". It matched holds by
// token only (review 22; it matches token and fence now). A holder under a caller's token (WithToken) that released
// and acquired again between Evict's Inspect and its evict.lua (a new
// acquisition, a new fence) was evicted though Inspect never saw it.
func TestR22EvictTakesNewAcquisitionOfSameToken(t *testing.T) {
	for _, kind := range []string{"mutex", "permit", "write", "read"} {
		t.Run(kind, func(t *testing.T) {
			admin := redistest.Client(t)
			prefix := redistest.Prefix(t, admin)
			rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
			t.Cleanup(func() { rdb.Close() })
			h := &evictHook{}
			rdb.AddHook(h)
			op := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
			t.Cleanup(func() { op.Close() })
			app := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
			t.Cleanup(func() { app.Close() })
			ctx := ctxFor(t, 20*time.Second)
			key := "r22tok" + kind
			acq := func() (*core.Lock, error) {
				o := []core.LockOption{core.WithToken("job-1"), core.WithTTL(30 * time.Second)}
				switch kind {
				case "permit":
					return app.Semaphore(key, 2).TryAcquire(ctx, o...)
				case "write":
					return app.RWMutex(key).TryLock(ctx, o...)
				case "read":
					return app.RWMutex(key).TryRLock(ctx, o...)
				}
				return app.TryLock(ctx, key, o...)
			}
			a, err := acq()
			if err != nil {
				t.Fatal(err)
			}
			var b *core.Lock
			h.before = func() {
				if err := a.Release(ctx); err != nil {
					t.Error(err)
				}
				time.Sleep(2 * time.Millisecond)
				b, err = acq()
				if err != nil {
					t.Error(err)
				}
			}
			info, err := op.Evict(ctx, key)
			if b == nil {
				t.Fatal("no new acquisition")
			}
			defer b.Release(ctx)
			after, _ := app.Inspect(ctx, key)
			held := after.Held || len(after.Holds) > 0
			t.Logf("A fence %d, B fence %d (a new acquisition); Evict: %+v, %v; B's hold there after: %v",
				a.Fence(), b.Fence(), info, err, held)
			if !held {
				t.Fatalf("Evict took B's %s hold (fence %d), acquired after its Inspect (which saw fence %d)", kind, b.Fence(), a.Fence())
			}
		})
	}
}

// dialGate runs fn (once armed) before each new connection is dialled:
// after LoseAnswer resets the connection, go-redis dials again to resend.
type dialGate struct {
	armed atomic.Bool
	once  sync.Once
	fn    func()
}

func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.armed.Load() {
			g.once.Do(g.fn)
		}
		return next(ctx, network, addr)
	}
}
func (g *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Review 22. The memo "<lease>:ev" was one per key: a second Evict of the
// key (another operator, a double click in the admin page) between the
// first's run and its resend overwrote it, and the resend, no longer
// finding its nonce, ran as new: it found nothing left and Evict said
// ErrNotHeld for an eviction it carried out. Each call has its own memo
// now ("<lease>:ev:<nonce>").
func TestR22EvictMemoOverwrittenByOtherEvict(t *testing.T) {
	admin := redistest.Client(t)
	p := faultnet.Start(t, redistest.Addr(t))
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	g := &dialGate{}
	rdb.AddHook(g)
	prefix := redistest.Prefix(t, admin)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { c.Close() })
	other := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { other.Close() })
	ctx := ctxFor(t, 20*time.Second)
	r20warm(t, ctx, c, other)
	l, err := other.TryLock(ctx, "r22memo", core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// The key's semaphore has a holder too; a second operator evicts that
	// one (by its token) while the first's answer is lost.
	pm, err := other.Semaphore("r22memo", 2).TryAcquire(ctx, core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Release(ctx)
	var err2 error
	g.fn = func() { _, err2 = other.Evict(ctx, "r22memo", pm.Token()) }
	g.armed.Store(true)
	lost := p.LoseAnswer([]byte("{r22memo}:sem:fence"))
	info, err := c.Evict(ctx, "r22memo", l.Token())
	mustLose(t, lost)
	after, _ := other.Inspect(ctx, "r22memo")
	t.Logf("Evict (answer lost): %v %v; the other Evict between: %v; held after: %v", info.Token, err, err2, after.Held)
	if after.Held {
		t.Fatal("not evicted")
	}
	if err != nil {
		t.Fatalf("Evict took %q's lease but reported %v (errors.Is ErrNotHeld %v)", l.Token(), err, errors.Is(err, core.ErrNotHeld))
	}
}

// Two handles of one token in one Client (WithToken re-entry): releasing
// the first deletes the shared lease with the fence of the later one
// (release.go: fence = max over twins) and, when it woke or granted a
// waiter, leaves the mark of that fence. The second handle's Release — a
// call that never ran before — then found that mark and answered
// "released" (nil) (review 22, before release.go told it ErrNotHeld), though its lease was released through the other handle
// and another Client holds the key now: Lock.Release's "ErrNotHeld when the
// lease had ... been taken over" no longer holds.
func TestR22TwinReleaseFindsOtherHandlesMark(t *testing.T) {
	for _, kind := range []string{"mutex", "write"} {
		t.Run(kind, func(t *testing.T) {
			admin := redistest.Client(t)
			prefix := redistest.Prefix(t, admin)
			c := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
			t.Cleanup(func() { c.Close() })
			other := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
			t.Cleanup(func() { other.Close() })
			ctx := ctxFor(t, 20*time.Second)
			key := "r22twin" + kind
			try := func(cl *core.Client, o ...core.LockOption) (*core.Lock, error) {
				if kind == "write" {
					return cl.RWMutex(key).TryLock(ctx, o...)
				}
				return cl.TryLock(ctx, key, o...)
			}
			wait := func(cl *core.Client) (*core.Lock, error) {
				if kind == "write" {
					return cl.RWMutex(key).Lock(ctx)
				}
				return cl.Lock(ctx, key)
			}
			a, err := try(c, core.WithToken("twin-1"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := try(c, core.WithToken("twin-1"))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *core.Lock, 1)
			go func() {
				l, err := wait(other)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(300 * time.Millisecond) // the waiter waits
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := <-got
			if w == nil {
				t.Fatal("no waiter")
			}
			defer w.Release(ctx)
			errB := b.Release(ctx)
			t.Logf("A fence %d, B fence %d, waiter took the key with fence %d; B.Release: %v; B.Err: %v",
				a.Fence(), b.Fence(), w.Fence(), errB, b.Err())
			if errB == nil {
				t.Fatalf("B.Release said released though its lease went with A's release and another Client (fence %d) holds the key", w.Fence())
			}
		})
	}
}
