package core_test

// Review 16: scripts that go-redis sends again after a lost answer
// (MaxRetries), beyond the claims fixed in bc2a91f; the tests of what was
// fixed, and of the acquisitions, which were safe already. Each test loses the
// answer of exactly one command (faultnet.LoseAnswer on a key unique to
// it) and checks what the caller is told.

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

// r16 runs fn against the real Redis through a proxy that can lose an
// answer; admin (no proxy) is for a second, unfaulted Client.
func r16(t *testing.T, fn func(t *testing.T, p *faultnet.Proxy, c, other *core.Client)) {
	admin := redistest.Client(t)
	p := faultnet.Start(t, redistest.Addr(t))
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis's default retries
	t.Cleanup(func() { rdb.Close() })
	prefix := redistest.Prefix(t, admin)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { c.Close() })
	other := mustNew(core.NewRedis(admin, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { other.Close() })
	fn(t, p, c, other)
}

func mustLose(t *testing.T, lost func() int) {
	t.Helper()
	if lost() != 1 {
		t.Fatalf("%d answers lost, want 1: the case under test did not arise", lost())
	}
}

// TryLockAll's acquire_all.lua, sent again, finds its own first lease and
// answers "member 1 held": the caller is told ErrNotAcquired while every
// key is held by tokens nobody has, until their TTL.
func TestR16TryLockAllLostAnswer(t *testing.T) {
	r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
		ctx := ctxFor(t, 20*time.Second)
		g, err := c.TryLockAll(ctx, []string{"r16warm1", "r16warm2"})
		if err != nil {
			t.Fatal(err)
		}
		_ = g.Release(ctx)

		lost := p.LoseAnswer([]byte("{r16all1}"))
		g, err = c.TryLockAll(ctx, []string{"r16all1", "r16all2"}, core.WithTTL(20*time.Second))
		t.Logf("TryLockAll, its answer lost %d time(s): %v", lost(), err)
		mustLose(t, lost)
		info, _ := other.Inspect(ctx, "r16all1")
		t.Logf("r16all1 after it: held=%v token=%q ttl=%v holds=%d", info.Held, info.Token, info.TTL, len(info.Holds))
		if _, terr := other.TryLock(ctx, "r16all1"); terr == nil {
			t.Log("another client could take r16all1")
		} else {
			t.Logf("another client's TryLock(r16all1): %v", terr)
		}
		if err != nil {
			t.Fatalf("the only locker of free keys was told %v; the keys stay locked by nobody", err)
		}
		_ = g.Release(ctx)
	})
}

// LockAll: the same, and then it waits key by key behind its own orphaned
// leases until their TTL (here past the wait timeout).
func TestR16LockAllLostAnswer(t *testing.T) {
	r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
		ctx := ctxFor(t, 20*time.Second)
		g, err := c.TryLockAll(ctx, []string{"r16warm1", "r16warm2"})
		if err != nil {
			t.Fatal(err)
		}
		_ = g.Release(ctx)

		lost := p.LoseAnswer([]byte("{r16lall1}"))
		start := time.Now()
		g, err = c.LockAll(ctx, []string{"r16lall1", "r16lall2"}, core.WithTTL(15*time.Second), core.WithWaitTimeout(3*time.Second))
		t.Logf("LockAll of two free keys, its answer lost %d time(s): %v after %v", lost(), err, time.Since(start).Round(time.Millisecond))
		mustLose(t, lost)
		if err != nil {
			t.Fatalf("LockAll of free keys failed: %v", err)
		}
		_ = g.Release(ctx)
	})
}

// release.lua and rw_unlock.lua (a write hold) sent again found nothing
// to release and answered 0: Release reported ErrNotHeld ("lease expired
// or taken over") for a hold it did release. A fenced release that finds
// no lease and the counter still at its fence answers released now. (A
// permit's or read hold's release, unfenced, and one whose key a waiter
// took meanwhile still answer 0: see NewRedis.)
func TestR16ReleaseLostAnswer(t *testing.T) {
	type acq func(ctx context.Context, c *core.Client, key string) (*core.Lock, error)
	cases := []struct {
		name string
		acq  acq
	}{
		{"mutex", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) { return c.TryLock(ctx, k) }},
		{"rw-write", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) {
			return c.RWMutex(k).TryLock(ctx)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
				ctx := ctxFor(t, 20*time.Second)
				w, err := tc.acq(ctx, c, "r16warm")
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Release(ctx); err != nil {
					t.Fatal(err)
				}
				h, err := tc.acq(ctx, c, "r16rel")
				if err != nil {
					t.Fatal(err)
				}
				lost := p.LoseAnswer([]byte("{r16rel}"))
				err = h.Release(ctx)
				t.Logf("Release, its answer lost %d time(s): %v", lost(), err)
				mustLose(t, lost)
				info, _ := other.Inspect(ctx, "r16rel")
				t.Logf("after it: held=%v holds=%d", info.Held, len(info.Holds))
				if err != nil {
					t.Fatalf("Release of a hold it released: %v (errors.Is ErrNotHeld: %v)", err, errors.Is(err, core.ErrNotHeld))
				}
			})
		})
	}
}

// Acquisitions sent again: re-entries of the caller's own fresh token
// (reported acquired, with a higher fence). Checked as safe.
func TestR16AcquireLostAnswerSafe(t *testing.T) {
	type acq func(ctx context.Context, c *core.Client, key string) (*core.Lock, error)
	cases := []struct {
		name string
		acq  acq
	}{
		{"trylock", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) { return c.TryLock(ctx, k) }},
		{"lock", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) { return c.Lock(ctx, k) }},
		{"fair", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) {
			return c.Lock(ctx, k, core.WithFair())
		}},
		{"semaphore", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) {
			return c.Semaphore(k, 1).TryAcquire(ctx)
		}},
		{"rw-write", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) { return c.RWMutex(k).Lock(ctx) }},
		{"rw-read", func(ctx context.Context, c *core.Client, k string) (*core.Lock, error) {
			return c.RWMutex(k).RLock(ctx)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
				ctx := ctxFor(t, 20*time.Second)
				w, err := tc.acq(ctx, c, "r16warm")
				if err != nil {
					t.Fatal(err)
				}
				_ = w.Release(ctx)
				lost := p.LoseAnswer([]byte("{r16acq}"))
				h, err := tc.acq(ctx, c, "r16acq")
				t.Logf("acquire, its answer lost %d time(s): %v", lost(), err)
				mustLose(t, lost)
				if err != nil {
					t.Fatalf("acquire of a free key: %v", err)
				}
				if err := h.Release(ctx); err != nil {
					t.Fatalf("release after: %v", err)
				}
				info, _ := other.Inspect(ctx, "r16acq")
				if info.Held || len(info.Holds) > 0 {
					t.Fatalf("held after release: %+v", info)
				}
			})
		})
	}
}

// Do turns the release's ErrNotHeld into ErrLost: a critical section that
// ran to its end under a lease it held throughout is reported as having
// lost its lease while it ran — the caller undoes or redoes the work.
func TestR16DoLostReleaseAnswer(t *testing.T) {
	r16(t, func(t *testing.T, p *faultnet.Proxy, c, other *core.Client) {
		ctx := ctxFor(t, 20*time.Second)
		if err := c.Do(ctx, "r16warm", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		var lost func() int
		err := c.Do(ctx, "r16do", func(ctx context.Context) error {
			lost = p.LoseAnswer([]byte("{r16do}")) // the next call naming the key: the release
			return nil
		})
		t.Logf("Do, the release's answer lost %d time(s): %v (ErrLost: %v)", lost(), err, errors.Is(err, core.ErrLost))
		mustLose(t, lost)
		if err != nil {
			t.Fatalf("Do whose fn ran under its lease to the end: %v", err)
		}
	})
}
