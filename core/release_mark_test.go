package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A release whose answer is lost is sent again by go-redis (MaxRetries).
// When the first run handed the key on — a grant to a fair waiter, or a
// wake-up that the waiter answered by taking the key — the second run
// finds the key another's and its counter moved on. It must still say
// "released" (review 18): Do would report ErrLost for work done under a
// lease it held to the end, and temporallock would run a finished
// activity again. A permit's or read hold's release, sent again, finds
// its token gone whether or not anyone waited.
func TestReleaseLostAnswerAfterWaiterTookKey(t *testing.T) {
	type hold struct {
		acquire func(ctx context.Context, c *core.Client, key string) (*core.Lock, error)
		wait    func(ctx context.Context, c *core.Client, key string) (*core.Lock, error)
		queued  string // the storage name whose existence shows the waiter waits
	}
	mutex := func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) { return c.TryLock(ctx, key) }
	cases := []struct {
		name string
		hold
	}{
		{"mutex-fair-waiter", hold{mutex, func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.Lock(ctx, key, core.WithFair())
		}, "}:w"}},
		{"mutex-waiter", hold{mutex, func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.Lock(ctx, key)
		}, "}:w:m"}},
		{"rw-write-waiting-writer", hold{func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).TryLock(ctx)
		}, func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).Lock(ctx)
		}, "}:rw:q"}},
		{"permit-waiter", hold{func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.Semaphore(key, 1).TryAcquire(ctx)
		}, func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.Semaphore(key, 1).Acquire(ctx)
		}, ""}},
		{"permit-alone", hold{func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.Semaphore(key, 2).TryAcquire(ctx)
		}, nil, ""}},
		{"read-hold-waiting-writer", hold{func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).TryRLock(ctx)
		}, func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).Lock(ctx)
		}, "}:rw:q"}},
		{"read-hold-alone", hold{func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).TryRLock(ctx)
		}, nil, ""}},
		{"rw-write-waiting-reader", hold{func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).TryLock(ctx)
		}, func(ctx context.Context, c *core.Client, key string) (*core.Lock, error) {
			return c.RWMutex(key).RLock(ctx)
		}, ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			admin := redistest.Client(t)
			p := faultnet.Start(t, redistest.Addr(t))
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis's default retries
			t.Cleanup(func() { rdb.Close() })
			prefix := redistest.Prefix(t, admin)
			c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
			t.Cleanup(func() { c.Close() })
			other := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
			t.Cleanup(func() { other.Close() })
			ctx := ctxFor(t, 20*time.Second)

			// Load the scripts on the proxied connection first: a NOSCRIPT
			// retry would be a second command the fault could take.
			w, err := tc.acquire(ctx, c, "rmwarm")
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
			h, err := tc.acquire(ctx, c, "rmkey")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *core.Lock, 1)
			if tc.wait == nil {
				got <- nil
			} else {
				go func() {
					l, err := tc.wait(ctx, other, "rmkey")
					if err != nil {
						t.Errorf("waiter: %v", err)
					}
					got <- l
				}()
			}
			if tc.queued != "" {
				name := prefix + ":{rmkey" + tc.queued
				for admin.Exists(ctx, name).Val() == 0 {
					if ctx.Err() != nil {
						t.Fatalf("the waiter never queued (%s)", name)
					}
					time.Sleep(5 * time.Millisecond)
				}
			} else if tc.wait != nil {
				time.Sleep(200 * time.Millisecond) // it waits on the channel: nothing to see
			}
			lost := p.LoseAnswer([]byte("{rmkey}"))
			err = h.Release(ctx)
			l := <-got
			t.Logf("Release, its answer lost %d time(s): %v", lost(), err)
			mustLose(t, lost)
			if l != nil && l.Fence() <= h.Fence() {
				t.Fatalf("waiter's fence %d not above the released %d", l.Fence(), h.Fence())
			}
			if err != nil {
				t.Fatalf("Release of a hold it released: %v (errors.Is ErrNotHeld: %v)", err, errors.Is(err, core.ErrNotHeld))
			}
			if l != nil {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// A release mark lasts a minute at most: it costs no memory for long.
			marks := 0
			for _, name := range admin.Keys(ctx, prefix+":*:rel*").Val() {
				marks++
				if ttl := admin.PTTL(ctx, name).Val(); ttl <= 0 || ttl > time.Minute {
					t.Fatalf("%s lives %v", name, ttl)
				}
			}
			t.Logf("%d release marks", marks)
		})
	}
}
