package locktest

// Exclusion, fences, tokens, stale handles, release, bad input, Inspect, Close.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

func testExclusion(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key)
	assertHeldElsewhere(t, c, key)
	if _, err := c.TryLock(ctxT(t), key+":other"); err != nil {
		t.Fatalf("a different key must be free: %v", err)
	}
	mustRelease(t, a)
	b := mustLock(t, c, key)
	mustRelease(t, b)
}

func testFenceIncreases(t *testing.T, c *core.Client, key string) {
	var last int64
	for i := 0; i < 20; i++ {
		l := mustLock(t, c, key)
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d not above %d", i, l.Fence(), last)
		}
		last = l.Fence()
		mustRelease(t, l)
	}
}

func testTokensUnique(t *testing.T, c *core.Client, key string) {
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		l := mustLock(t, c, key)
		if len(l.Token()) < 22 || seen[l.Token()] {
			t.Fatalf("token %q: too short or repeated", l.Token())
		}
		seen[l.Token()] = true
		mustRelease(t, l)
	}
}

func testStaleHandle(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key, core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
	waitClosed(t, a.Lost(), 5*time.Second, "expiry of the unrenewed lease")
	b := lockSoon(t, c, key)
	if b.Fence() <= a.Fence() {
		t.Fatalf("new holder's fence %d not above the stale one's %d", b.Fence(), a.Fence())
	}
	if err := a.Extend(ctxT(t), time.Minute); !errors.Is(err, core.ErrNotHeld) {
		t.Fatalf("stale Extend: got %v, want ErrNotHeld", err)
	}
	if err := a.Release(ctxT(t)); !errors.Is(err, core.ErrNotHeld) {
		t.Fatalf("stale Release: got %v, want ErrNotHeld", err)
	}
	assertHeldElsewhere(t, c, key)
	info, err := c.Inspect(ctxT(t), key)
	if err != nil || !info.Held || info.Token != b.Token() {
		t.Fatalf("the new holder was disturbed: %+v, %v", info, err)
	}
	mustRelease(t, b)
}

func testReleaseIdempotent(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key)
	mustRelease(t, l)
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	b := mustLock(t, c, key)
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("third Release: %v", err)
	}
	assertHeldElsewhere(t, c, key) // b is undisturbed
	mustRelease(t, b)
}

func testReleaseCancelledContext(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a cancelled context: %v", err)
	}
	mustRelease(t, mustLock(t, c, key))
}

func testInvalidInput(t *testing.T, c *core.Client, key string) {
	ctx := ctxT(t)
	cases := []struct {
		name string
		key  string
		opts []core.LockOption
		want error
	}{
		{"empty key", "", nil, core.ErrInvalidKey},
		{"long key", strings.Repeat("k", core.MaxKeyLen+1), nil, core.ErrInvalidKey},
		{"zero ttl", key, []core.LockOption{core.WithTTL(0)}, core.ErrInvalidTTL},
		{"negative ttl", key, []core.LockOption{core.WithTTL(-time.Second)}, core.ErrInvalidTTL},
		{"sub-ms ttl", key, []core.LockOption{core.WithTTL(time.Microsecond)}, core.ErrInvalidTTL},
		{"bad token", key, []core.LockOption{core.WithToken("has space")}, core.ErrInvalidOption},
		{"empty token", key, []core.LockOption{core.WithToken("")}, core.ErrInvalidOption},
		{"negative wait", key, []core.LockOption{core.WithWaitTimeout(-1)}, core.ErrInvalidOption},
		{"negative budget", key, []core.LockOption{core.WithRetryBudget(-1)}, core.ErrInvalidOption},
		{"long metadata", key, []core.LockOption{core.WithMetadata(strings.Repeat("m", core.MaxMetadataLen+1))}, core.ErrInvalidOption},
	}
	for _, tc := range cases {
		if _, err := c.TryLock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("TryLock, %s: got %v, want %v", tc.name, err, tc.want)
		}
		if _, err := c.Lock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("Lock, %s: got %v, want %v", tc.name, err, tc.want)
		}
		err := c.Do(ctx, tc.key, func(context.Context) error { return nil }, tc.opts...)
		if !errors.Is(err, tc.want) {
			t.Errorf("Do, %s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := c.Do(ctx, key, nil); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("Do(nil func): got %v, want ErrInvalidOption", err)
	}
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Inspect(\"\"): got %v, want ErrInvalidKey", err)
	}
	// A key with braces, spaces and non-ASCII bytes is fine.
	odd := key + ":{a}b} c\x00é"
	mustRelease(t, mustLock(t, c, odd))
	long := key + strings.Repeat("x", core.MaxKeyLen-len(key))
	mustRelease(t, mustLock(t, c, long))
}

func testInspect(t *testing.T, c *core.Client, key string) {
	ctx := ctxT(t)
	if info, err := c.Inspect(ctx, key); err != nil || info.Held || info.Key != key {
		t.Fatalf("Inspect of a fresh key: %+v, %v", info, err)
	}
	l := mustLock(t, c, key, core.WithMetadata("host-a/42"), core.WithTTL(time.Minute))
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Fence: Redlock reports the highest counter of its nodes, which may be
	// above the holder's fence; it is never below.
	if !info.Held || info.Token != l.Token() || info.Metadata != "host-a/42" || info.Fence < l.Fence() ||
		info.TTL <= 0 || info.TTL > time.Minute {
		t.Fatalf("Inspect of a held key: %+v (token %q, fence %d)", info, l.Token(), l.Fence())
	}
	mustRelease(t, l)
	info, err = c.Inspect(ctx, key)
	if err != nil || info.Held || info.Fence < l.Fence() {
		t.Fatalf("Inspect after release: %+v, %v (want the last fence %d)", info, err, l.Fence())
	}
}

func testContention(t *testing.T, c *core.Client, key string) {
	const workers, rounds = 8, 15
	var inside, overlaps, total atomic.Int64
	var lastFence atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				err := c.Do(ctxT(t), key, func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					l, err := c.TryLock(ctx, key) // re-entry: read the fence
					if err != nil {
						return err
					}
					if l.Fence() <= lastFence.Load() {
						overlaps.Add(1)
					}
					lastFence.Store(l.Fence())
					l.Release(ctx)
					time.Sleep(time.Millisecond)
					total.Add(1)
					inside.Add(-1)
					return nil
				}, core.WithWaitTimeout(20*time.Second))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if overlaps.Load() != 0 || total.Load() != workers*rounds {
		t.Fatalf("%d overlaps or fence regressions, %d of %d critical sections", overlaps.Load(), total.Load(), workers*rounds)
	}
}

func testDoReleasesOnPanic(t *testing.T, c *core.Client, key string) {
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the callback's panic", r)
			}
		}()
		c.Do(ctxT(t), key, func(context.Context) error { panic("boom") })
	}()
	mustRelease(t, mustLock(t, c, key))
}

func testClose(t *testing.T, c *core.Client, key string) {
	held := mustLock(t, c, key)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctxT(t), key)
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waited; !errors.Is(err, core.ErrClosed) {
		t.Fatalf("a wait across Close: got %v, want ErrClosed", err)
	}
	waitClosed(t, held.Lost(), time.Second, "Lost of a lease held across Close")
	if _, err := c.TryLock(ctxT(t), key); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("TryLock after Close: got %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
