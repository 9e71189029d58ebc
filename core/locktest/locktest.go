// Package locktest is the conformance suite of core.Client backends: every
// backend — in-memory, single Redis, Redis Cluster, Redlock, or one you
// write — must pass it the same way.
//
// Run it from a test:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T) *core.Client {
//			return core.NewRedis(rdb)
//		})
//	}
//
// newClient is called once per subtest; the suite closes the client when the
// subtest ends. Subtests run in parallel and use keys unique to themselves.
// The suite sleeps for short TTLs to pass (about three seconds in all), so a
// backend whose clock does not run (miniredis) must be driven forward by the
// caller, for example with a goroutine calling FastForward.
package locktest

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// Run runs the conformance suite.
func Run(t *testing.T, newClient func(t *testing.T) *core.Client) {
	tests := []struct {
		name string
		fn   func(t *testing.T, c *core.Client, key string)
	}{
		{"Exclusion", testExclusion},
		{"FenceIncreases", testFenceIncreases},
		{"TokensUnique", testTokensUnique},
		{"StaleHandle", testStaleHandle},
		{"ReleaseIdempotent", testReleaseIdempotent},
		{"ReleaseCancelledContext", testReleaseCancelledContext},
		{"ExpiryWithoutRenewal", testExpiryWithoutRenewal},
		{"Renewal", testRenewal},
		{"Extend", testExtend},
		{"LossReported", testLossReported},
		{"DoCancelledOnLoss", testDoCancelledOnLoss},
		{"WaitWokenByRelease", testWaitWokenByRelease},
		{"WaitBounded", testWaitBounded},
		{"Reentrancy", testReentrancy},
		{"TokenReentry", testTokenReentry},
		{"InvalidInput", testInvalidInput},
		{"Inspect", testInspect},
		{"MutualExclusionUnderContention", testContention},
		{"DoReleasesOnPanic", testDoReleasesOnPanic},
		{"Close", testClose},
		{"FairOrder", testFairOrder},
		{"FairGiveUp", testFairGiveUp},
		{"ReleaseWakesEveryTime", testReleaseWakesEveryTime},
		{"ExpiryNeverMovesBack", testExpiryNeverMovesBack},
		{"KeyBraces", testKeyBraces},
		{"DriftMarginValidated", testDriftMarginValidated},
		{"LostBeforeTakeover", testLostBeforeTakeover},
		{"CloseTellsEveryLease", testCloseTellsEveryLease},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t)
			t.Cleanup(func() { c.Close() })
			tc.fn(t, c, uniqueKey(t))
		})
	}
}

func uniqueKey(t *testing.T) string {
	return "locktest:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + rand.Text()[:8]
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustLock(t *testing.T, c *core.Client, key string, opts ...core.LockOption) *core.Lock {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key, opts...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}

func mustRelease(t *testing.T, l *core.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", l.Key(), err)
	}
}

func assertHeldElsewhere(t *testing.T, c *core.Client, key string) {
	t.Helper()
	l, err := c.TryLock(context.Background(), key)
	if !errors.Is(err, core.ErrNotAcquired) {
		if l != nil {
			l.Release(context.Background())
		}
		t.Fatalf("TryLock(%q) on a held key: got %v, want ErrNotAcquired", key, err)
	}
}

// waitClosed fails the test if ch is not closed within d (a generous bound
// on something that must happen, not a performance assertion).
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

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

func testExpiryWithoutRenewal(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key, core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
	waitClosed(t, l.Lost(), 5*time.Second, "Lost after the TTL")
	if !errors.Is(l.Err(), core.ErrLost) {
		t.Fatalf("Err after expiry: %v", l.Err())
	}
	// The server's expiry may trail the local one by a few milliseconds.
	mustRelease(t, lockSoon(t, c, key))
}

// lockSoon takes key, retrying while it is still held for up to 5 s.
func lockSoon(t *testing.T, c *core.Client, key string) *core.Lock {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := c.TryLock(ctxT(t), key)
		switch {
		case err == nil:
			return l
		case !errors.Is(err, core.ErrNotAcquired) || time.Now().After(deadline):
			t.Fatalf("TryLock(%q): %v", key, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testRenewal(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key, core.WithTTL(900*time.Millisecond))
	time.Sleep(2500 * time.Millisecond) // > 2 TTLs: only renewal keeps it
	select {
	case <-l.Lost():
		t.Fatalf("renewed lease reported lost: %v", l.Err())
	default:
	}
	assertHeldElsewhere(t, c, key)
	mustRelease(t, l)
}

func testExtend(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key, core.WithTTL(500*time.Millisecond), core.WithAutoRenew(false))
	if err := l.Extend(ctxT(t), 10*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	time.Sleep(900 * time.Millisecond)
	assertHeldElsewhere(t, c, key)
	select {
	case <-l.Lost():
		t.Fatalf("extended lease reported lost: %v", l.Err())
	default:
	}
	if err := l.Extend(ctxT(t), 0); !errors.Is(err, core.ErrInvalidTTL) {
		t.Fatalf("Extend(0): got %v, want ErrInvalidTTL", err)
	}
	mustRelease(t, l)
	if err := l.Extend(ctxT(t), time.Second); !errors.Is(err, core.ErrNotHeld) {
		t.Fatalf("Extend after Release: got %v, want ErrNotHeld", err)
	}
}

// stealLease deletes the lease behind its holder's back, the way a second
// process holding the token would.
func stealLease(t *testing.T, c *core.Client, token, key string) {
	t.Helper()
	other, err := c.TryLock(context.Background(), key, core.WithToken(token))
	if err != nil {
		t.Fatalf("re-enter with token: %v", err)
	}
	mustRelease(t, other)
}

func testLossReported(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key, core.WithTTL(900*time.Millisecond))
	stealLease(t, c, l.Token(), key)
	waitClosed(t, l.Lost(), 5*time.Second, "Lost after the lease vanished")
	if !errors.Is(l.Err(), core.ErrLost) {
		t.Fatalf("Err: got %v, want ErrLost", l.Err())
	}
	if err := l.Release(ctxT(t)); !errors.Is(err, core.ErrNotHeld) {
		t.Fatalf("Release of a lost lease: got %v, want ErrNotHeld", err)
	}
}

func testDoCancelledOnLoss(t *testing.T, c *core.Client, key string) {
	var cause error
	err := c.Do(ctxT(t), key, func(ctx context.Context) error {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			return err
		}
		stealLease(t, c, info.Token, key)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("callback context not cancelled after loss")
		}
	}, core.WithTTL(900*time.Millisecond))
	if !errors.Is(cause, core.ErrLost) {
		t.Fatalf("context.Cause in the callback: got %v, want ErrLost", cause)
	}
	if !errors.Is(err, core.ErrLost) {
		t.Fatalf("Do: got %v, want ErrLost", err)
	}
}

func testWaitWokenByRelease(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key, core.WithTTL(time.Minute))
	got := make(chan error, 1)
	go func() {
		// The holder's lease lasts a minute and a waiter's fallback timer is
		// seconds long: only the release notification can wake it in time.
		l, err := c.Lock(ctxT(t), key, core.WithWaitTimeout(3*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	mustRelease(t, a)
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func testWaitBounded(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key)
	defer mustRelease(t, a)

	_, err := c.Lock(ctxT(t), key, core.WithWaitTimeout(100*time.Millisecond))
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WithWaitTimeout: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, key)
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline: got %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = c.Lock(ctx, key)
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("ctx cancel: got %v, want ErrNotAcquired and Canceled", err)
	}
	_, err = c.Lock(ctxT(t), key, core.WithRetryBudget(1))
	if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("retry budget: got %v, want ErrNotAcquired", err)
	}
	err = c.Do(ctxT(t), key, func(context.Context) error { return nil }, core.WithRetryBudget(0))
	if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("Do with budget 0: got %v, want ErrNotAcquired", err)
	}
}

func testReentrancy(t *testing.T, c *core.Client, key string) {
	err := c.Do(ctxT(t), key, func(ctx context.Context) error {
		inner, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("nested TryLock: %v", err)
		}
		info, _ := c.Inspect(ctx, key)
		if inner.Token() != info.Token {
			t.Fatalf("nested handle does not share the lease")
		}
		nested, err := c.Lock(ctx, key)
		if err != nil || nested.Fence() != inner.Fence() {
			t.Fatalf("nested Lock: %v (fence %d, want %d)", err, nested.Fence(), inner.Fence())
		}
		mustRelease(t, nested)
		mustRelease(t, inner)
		assertHeldElsewhere(t, c, key) // the outer hold survives
		return c.Do(ctx, key, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	// Lock.WithContext does the same outside Do.
	l := mustLock(t, c, key)
	again, err := c.TryLock(l.WithContext(context.Background()), key)
	if err != nil {
		t.Fatalf("TryLock with Lock.WithContext: %v", err)
	}
	mustRelease(t, again)
	assertHeldElsewhere(t, c, key)
	mustRelease(t, l)
	mustRelease(t, mustLock(t, c, key))
}

func testTokenReentry(t *testing.T, c *core.Client, key string) {
	a := mustLock(t, c, key, core.WithTTL(time.Minute))
	b := mustLock(t, c, key, core.WithToken(a.Token()))
	// Redlock may report a higher fence for the re-entered lease (the
	// highest counter of the nodes that answered); never a lower one.
	if b.Fence() < a.Fence() || b.Token() != a.Token() {
		t.Fatalf("re-entry by token: fence %d token %q, want %d %q", b.Fence(), b.Token(), a.Fence(), a.Token())
	}
	mustRelease(t, b)
	mustRelease(t, mustLock(t, c, key)) // the shared lease is gone
	_, err := c.TryLock(ctxT(t), key, core.WithToken("chosen-token"))
	if err != nil {
		t.Fatalf("a free key with a chosen token: %v", err)
	}
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

// waitWaiters waits until Inspect shows n fair waiters on key.
func waitWaiters(t *testing.T, c *core.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d fair waiters queued, want %d", info.Waiters, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func testFairOrder(t *testing.T, c *core.Client, key string) {
	skipUnlessFair(t, c, key)
	const waiters = 6
	holder := mustLock(t, c, key, core.WithFair(), core.WithTTL(time.Minute))
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctxT(t), key, core.WithFair(), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			l.Release(context.Background())
		}()
		waitWaiters(t, c, key, i+1) // arrival order is known
	}
	// TryLock in fair mode does not jump the queue, and does not join it.
	if _, err := c.TryLock(ctxT(t), key, core.WithFair()); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("fair TryLock on a queued key: %v", err)
	}
	mustRelease(t, holder)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want arrival order", order)
		}
	}
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters acquired", len(order), waiters)
	}
	info, _ := c.Inspect(ctxT(t), key)
	if info.Held || info.Waiters != 0 {
		t.Fatalf("after the queue drained: %+v", info)
	}
}

func testFairGiveUp(t *testing.T, c *core.Client, key string) {
	skipUnlessFair(t, c, key)
	holder := mustLock(t, c, key, core.WithFair(), core.WithTTL(time.Minute))
	quitter := make(chan error, 1)
	quit, giveUp := context.WithCancel(ctxT(t))
	go func() {
		_, err := c.Lock(quit, key, core.WithFair())
		quitter <- err
	}()
	waitWaiters(t, c, key, 1)
	got := make(chan error, 1)
	go func() {
		// The grant must come by notification: the fallback poll of a fair
		// waiter is 0.8-1 s, past this timeout.
		l, err := c.Lock(ctxT(t), key, core.WithFair(), core.WithWaitTimeout(700*time.Millisecond))
		if err == nil {
			l.Release(context.Background())
		}
		got <- err
	}()
	waitWaiters(t, c, key, 2)
	giveUp()
	if err := <-quitter; !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("quitter: %v", err)
	}
	waitWaiters(t, c, key, 1) // it left the queue
	mustRelease(t, holder)
	if err := <-got; err != nil {
		t.Fatalf("second waiter after the first gave up: %v", err)
	}
}

// skipUnlessFair skips fair-mode tests on backends without it (Redlock).
func skipUnlessFair(t *testing.T, c *core.Client, key string) {
	t.Helper()
	l, err := c.TryLock(context.Background(), key+":probe", core.WithFair())
	if errors.Is(err, core.ErrInvalidOption) {
		t.Skipf("backend has no fair mode: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, l)
}
