package core_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// TestLockAllAllOrNothing: a failed TryLockAll or LockAll leaves no key
// held; a successful one holds every key (duplicates once) until Release.
func TestLockAllAllOrNothing(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c, other := newClient(), newClient()
		defer c.Close()
		defer other.Close()
		ctx := ctxFor(t, 20*time.Second)
		held, err := other.TryLock(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLockAll(ctx, []string{"c", "a", "b"}); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("TryLockAll with b held: %v, want ErrNotAcquired", err)
		}
		if _, err := c.LockAll(ctx, []string{"c", "a", "b"}, core.WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("LockAll with b held: %v, want ErrNotAcquired", err)
		}
		for _, k := range []string{"a", "c"} { // given back
			l, err := other.TryLock(ctx, k)
			if err != nil {
				t.Fatalf("%s after the failed attempts: %v", k, err)
			}
			l.Release(ctx)
		}
		held.Release(ctx)
		g, err := c.TryLockAll(ctx, []string{"c", "a", "b", "a"})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, l := range g.Locks() {
			keys = append(keys, l.Key())
		}
		if fmt.Sprint(keys) != "[a b c]" {
			t.Fatalf("members %v, want [a b c]", keys)
		}
		if _, err := other.TryLock(ctx, "c"); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("c while the group holds it: %v", err)
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g2, err := other.TryLockAll(ctx, []string{"a", "b", "c"})
		if err != nil {
			t.Fatalf("after Release: %v", err)
		}
		g2.Release(ctx)
		if _, err := c.LockAll(ctx, nil); !errors.Is(err, core.ErrInvalidOption) {
			t.Errorf("no keys: %v", err)
		}
		if _, err := c.LockAll(ctx, []string{"a", ""}); !errors.Is(err, core.ErrInvalidKey) {
			t.Errorf("an empty key: %v", err)
		}
	})
}

// TestLockAllNoDeadlock: callers on separate Clients asking for the same
// keys in opposite orders all get them, one at a time.
func TestLockAllNoDeadlock(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		orders := [][]string{{"x", "y", "z"}, {"z", "y", "x"}, {"y", "x", "z"}}
		var wg sync.WaitGroup
		var mu sync.Mutex
		inside := 0
		for _, keys := range orders {
			c := newClient()
			defer c.Close()
			wg.Go(func() {
				for range 10 {
					g, err := c.LockAll(ctxFor(t, 20*time.Second), keys, core.WithWaitTimeout(10*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					inside++
					if inside > 1 {
						t.Error("two groups of the same keys at once")
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
					if err := g.Release(ctxFor(t, 5*time.Second)); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	})
}

// TestGroupLost: the group's Lost closes when any member is lost.
func TestGroupLost(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c := newClient()
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		g, err := c.TryLockAll(ctx, []string{"p", "q"})
		if err != nil {
			t.Fatal(err)
		}
		short, err := c.TryLockAll(ctx, []string{"r", "s"}, core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-short.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("a group whose leases expired is not lost")
		}
		select {
		case <-g.Lost():
			t.Fatal("a renewed group is lost")
		default:
		}
		// The holder stops believing a little before the server expires
		// the keys: Release may still find them (nil) or not (ErrNotHeld).
		if err := short.Release(ctx); err != nil && !errors.Is(err, core.ErrNotHeld) {
			t.Errorf("Release of a lost group: %v", err)
		}
		if err := g.Release(ctx); err != nil {
			t.Error(err)
		}
	})
}

// TestLockAllMemberLostWhileWaiting: a key taken early and lost while
// LockAll waits for another fails the call, which gives back the rest:
// every key or none.
func TestLockAllMemberLostWhileWaiting(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c, other := newClient(), newClient()
		defer c.Close()
		defer other.Close()
		ctx := ctxFor(t, 20*time.Second)
		held, err := other.TryLock(ctx, "lw-b")
		if err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(300 * time.Millisecond); held.Release(ctx) }()
		g, err := c.LockAll(ctx, []string{"lw-a", "lw-b"}, core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
		if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, core.ErrLost) {
			t.Fatalf("LockAll with lw-a lost while it waited for lw-b: %v, %v; want ErrNotAcquired and ErrLost", g, err)
		}
		l, err := other.TryLock(ctx, "lw-b")
		if err != nil {
			t.Fatalf("lw-b after the failed LockAll: %v", err)
		}
		l.Release(ctx)
	})
}
