package locktest

// The holder's promise: it is told (Lost) no later than anyone else can
// take its key, and nothing — a late renewal, a re-entry, Close — shortens
// a lease behind its back.

import (
	"context"
	"errors"
	"time"

	"testing"

	"github.com/latchkey/latchkey/core"
)

// testLostBeforeTakeover: a lease left to expire closes Lost before another
// client can take the key.
func testLostBeforeTakeover(t *testing.T, c *core.Client, key string) {
	a, b := c, c                         // two acquisitions without re-entry contend like two processes
	const margin = 50 * time.Millisecond // room for the watcher goroutine below
	l := mustLock(t, a, key, core.WithTTL(400*time.Millisecond), core.WithAutoRenew(false), core.WithDriftMargin(margin))
	told := make(chan time.Time, 1)
	go func() {
		<-l.Lost()
		told <- time.Now()
	}()
	got, err := b.Lock(ctxT(t), key, core.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("the rival's Lock: %v", err)
	}
	taken := time.Now()
	defer mustRelease(t, got)
	select {
	case at := <-told:
		if at.After(taken) {
			t.Fatalf("the holder was told %v after the rival took the key", at.Sub(taken))
		}
	case <-time.After(time.Second):
		t.Fatal("the rival took the key and the holder was never told")
	}
	if !errors.Is(l.Err(), core.ErrLost) {
		t.Fatalf("Err: %v, want ErrLost", l.Err())
	}
	if got.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", got.Fence(), l.Fence())
	}
}

// testCloseTellsEveryLease: Close reports every lease lost, and the
// handles' Release and Extend then say ErrClosed.
func testCloseTellsEveryLease(t *testing.T, c *core.Client, key string) {
	renewed := mustLock(t, c, key, core.WithTTL(time.Minute))
	plain := mustLock(t, c, key+":2", core.WithTTL(time.Minute), core.WithAutoRenew(false))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*core.Lock{renewed, plain} {
		waitClosed(t, l.Lost(), time.Second, "Lost after Close")
		if !errors.Is(l.Err(), core.ErrClosed) || !errors.Is(l.Err(), core.ErrLost) {
			t.Fatalf("Err after Close: %v, want ErrLost and ErrClosed", l.Err())
		}
		if err := l.Extend(ctxT(t), time.Minute); !errors.Is(err, core.ErrClosed) {
			t.Fatalf("Extend after Close: %v, want ErrClosed", err)
		}
		if err := l.Release(ctxT(t)); !errors.Is(err, core.ErrClosed) {
			t.Fatalf("Release after Close: %v, want ErrClosed", err)
		}
	}
}

// testReleaseWakesEveryTime: every release wakes a waiter, even two
// releases of the same token in quick succession (a fixed WithToken).
func testReleaseWakesEveryTime(t *testing.T, c *core.Client, key string) {
	const token = "fixed-token-1"
	for try := 0; try < 5; try++ {
		h := mustLock(t, c, key, core.WithToken(token), core.WithTTL(time.Minute))
		got := make(chan error, 1)
		go func() {
			// Wait timeout below a waiter's fallback sleep (seconds, with
			// the holder's TTL a minute): only a notification is in time.
			l, err := c.Lock(ctxT(t), key, core.WithWaitTimeout(3*time.Second))
			if err == nil {
				err = l.Release(context.Background())
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond) // the waiter sleeps
		mustRelease(t, h)
		// Take it back at once with the same token, before the woken waiter
		// retries (it then goes back to sleep).
		h2, err := c.TryLock(ctxT(t), key, core.WithToken(token), core.WithTTL(time.Minute))
		if errors.Is(err, core.ErrNotAcquired) { // the waiter was faster: try again
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		mustRelease(t, h2) // the same token's second release, within a second
		if err := <-got; err != nil {
			t.Fatalf("waiter after the second release: %v", err)
		}
		return
	}
	t.Skip("the waiter always won the race to the first release")
}

// testExpiryNeverMovesBack: neither a shorter Extend nor a re-entry with a
// shorter TTL shortens a lease.
func testExpiryNeverMovesBack(t *testing.T, c *core.Client, key string) {
	ctx := ctxT(t)
	l := mustLock(t, c, key, core.WithTTL(time.Minute))
	defer mustRelease(t, l)
	ttlLeft := func() time.Duration {
		t.Helper()
		info, err := c.Inspect(ctx, key)
		if err != nil || !info.Held {
			t.Fatalf("Inspect: %+v, %v", info, err)
		}
		return info.TTL
	}
	if err := l.Extend(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := ttlLeft(); d < 30*time.Second {
		t.Fatalf("TTL after a shorter Extend: %v, want about a minute", d)
	}
	r := mustLock(t, c, key, core.WithToken(l.Token()), core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
	_ = r // shares the lease; released with it
	if d := ttlLeft(); d < 30*time.Second {
		t.Fatalf("TTL after a shorter re-entry: %v, want about a minute", d)
	}
	time.Sleep(400 * time.Millisecond)
	select {
	case <-l.Lost():
		t.Fatalf("lost after a shorter re-entry expired: %v", l.Err())
	default:
	}
}

// testKeyBraces: every accepted key works, whatever its braces (on Redis
// Cluster the key sits in a hash tag); a key starting with '}' is refused.
func testKeyBraces(t *testing.T, c *core.Client, key string) {
	for _, k := range []string{"a}" + key, "{" + key + "}", key + "{", "{" + key, key + "}", "{}" + key} {
		l := mustLock(t, c, k)
		if _, err := c.Inspect(ctxT(t), k); err != nil {
			t.Fatalf("Inspect(%q): %v", k, err)
		}
		mustRelease(t, l)
	}
	for _, k := range []string{"}", "}" + key} {
		if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, core.ErrInvalidKey) {
			t.Fatalf("TryLock(%q): %v, want ErrInvalidKey", k, err)
		}
	}
}

// testDriftMarginValidated: a negative margin, or one not below the TTL, is
// refused.
func testDriftMarginValidated(t *testing.T, c *core.Client, key string) {
	for _, opts := range [][]core.LockOption{
		{core.WithDriftMargin(-time.Millisecond)},
		{core.WithTTL(time.Second), core.WithDriftMargin(time.Second)},
	} {
		if _, err := c.TryLock(ctxT(t), key, opts...); !errors.Is(err, core.ErrInvalidOption) {
			t.Fatalf("TryLock with a bad drift margin: %v, want ErrInvalidOption", err)
		}
	}
}
