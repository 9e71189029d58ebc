package core_test

// Review 21: Redlock under lost answers on several nodes at once. The
// release tests failed before a Redlock release marked each node with its
// nonce (release.lua); the acquisition and renewal ones were safe already.

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

// r21 starts n private redis-servers, each behind a faultnet proxy, and a
// Redlock Client (go-redis default retries) through the proxies, plus a
// second Client straight to the servers.
func r21(t *testing.T, n int) (proxies []*faultnet.Proxy, c, other *core.Client) {
	var direct, via []redis.UniversalClient
	for i := 0; i < n; i++ {
		s := redistest.StartServer(t)
		direct = append(direct, s.Client(t))
		p := faultnet.Start(t, s.Addr())
		proxies = append(proxies, p)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { rdb.Close() })
		via = append(via, rdb)
	}
	prefix := testPrefix()
	c = mustNew(core.NewRedlock(via, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { c.Close() })
	other = mustNew(core.NewRedlock(direct, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { other.Close() })
	warmUp(t, c)
	warmUp(t, other)
	return proxies, c, other
}

func loseOn(ps []*faultnet.Proxy, match string) func() int {
	var fs []func() int
	for _, p := range ps {
		fs = append(fs, p.LoseAnswer([]byte(match)))
	}
	return func() int {
		n := 0
		for _, f := range fs {
			n += f()
		}
		return n
	}
}

// A Redlock release whose answers a majority of nodes lost: go-redis sends
// release.lua again, which finds nothing and answers 0. The release
// deleted the lease on every node, yet the caller is told ErrNotHeld
// ("expired or taken over"). NewRedis answers released here (review 16).
func TestR21RedlockReleaseLostAnswers(t *testing.T) {
	ps, c, other := r21(t, 5)
	ctx := ctxFor(t, 20*time.Second)
	l, err := c.TryLock(ctx, "r21rel", core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost := loseOn(ps[:3], "{r21rel}")
	err = l.Release(ctx)
	t.Logf("Release, %d answers lost: %v", lost(), err)
	if lost() != 3 {
		t.Fatalf("%d answers lost, want 3", lost())
	}
	info, ierr := other.Inspect(ctx, "r21rel")
	t.Logf("after it: held=%v (%v)", info.Held, ierr)
	if info.Held {
		t.Fatal("still held")
	}
	if err != nil {
		t.Fatalf("Release of a lease it held and deleted on every node: %v (ErrNotHeld: %v)", err, errors.Is(err, core.ErrNotHeld))
	}
}

// Acquisition whose answers 3 of 5 nodes lost: the second run re-enters.
// It must be acquired, with a fence above the last one, and leave the key
// to nobody else.
func TestR21RedlockAcquireLostAnswers(t *testing.T) {
	for _, k := range []int{2, 3, 4, 5} {
		ps, c, other := r21(t, 5)
		ctx := ctxFor(t, 20*time.Second)
		var last int64
		for round := 0; round < 3; round++ {
			lost := loseOn(ps[:k], "{r21acq}")
			l, err := c.TryLock(ctx, "r21acq", core.WithTTL(10*time.Second))
			t.Logf("k=%d round %d: TryLock with %d answers lost: err=%v", k, round, lost(), err)
			if err != nil {
				info, _ := other.Inspect(ctx, "r21acq")
				if info.Held {
					t.Fatalf("not acquired, yet a majority holds the key (token %q)", info.Token)
				}
				continue
			}
			if l.Fence() <= last {
				t.Fatalf("fence %d not above %d", l.Fence(), last)
			}
			last = l.Fence()
			if _, err := other.TryLock(ctx, "r21acq"); err == nil {
				t.Fatal("another client took a key held")
			}
			info, _ := other.Inspect(ctx, "r21acq")
			if info.Fence < l.Fence() {
				t.Fatalf("inspect fence %d below the holder's %d", info.Fence, l.Fence())
			}
			if err := l.Release(ctx); err != nil {
				t.Logf("release: %v", err)
			}
			// and another client's next fence is higher
			o, err := other.TryLock(ctx, "r21acq")
			if err != nil {
				t.Fatalf("other after release: %v", err)
			}
			if o.Fence() <= last {
				t.Fatalf("other's fence %d not above %d", o.Fence(), last)
			}
			last = o.Fence()
			o.Release(ctx)
		}
	}
}

// Renewal (Extend) whose answers a majority lost: extend.lua is
// idempotent; the lease must stay held, and the holder must not believe
// past a majority's expiry.
func TestR21RedlockExtendLostAnswers(t *testing.T) {
	ps, c, other := r21(t, 5)
	ctx := ctxFor(t, 20*time.Second)
	l, err := c.TryLock(ctx, "r21ext", core.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost := loseOn(ps[:3], "{r21ext}")
	err = l.Extend(ctx, 3*time.Second)
	t.Logf("Extend, %d answers lost: %v", lost(), err)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	info, _ := other.Inspect(ctx, "r21ext")
	t.Logf("held=%v ttl=%v", info.Held, info.TTL)
	if !info.Held {
		t.Fatal("not held after extend")
	}
	l.Release(ctx)
}

// Do on Redlock: the same lost release answers turn a callback that ran
// to its end under a lease held throughout into ErrLost.
func TestR21RedlockDoLostReleaseAnswers(t *testing.T) {
	ps, c, _ := r21(t, 5)
	ctx := ctxFor(t, 20*time.Second)
	var lost func() int
	err := c.Do(ctx, "r21do", func(ctx context.Context) error {
		lost = loseOn(ps[:3], "{r21do}")
		return nil
	}, core.WithTTL(30*time.Second))
	t.Logf("Do, %d release answers lost: %v", lost(), err)
	if lost() != 3 {
		t.Fatalf("%d answers lost, want 3", lost())
	}
	if err != nil {
		t.Fatalf("Do whose callback finished under its lease: %v (ErrLost: %v)", err, errors.Is(err, core.ErrLost))
	}
}
