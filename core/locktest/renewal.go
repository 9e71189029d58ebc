package locktest

// Expiry, renewal, Extend, and the loss signal.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

func testExpiryWithoutRenewal(t *testing.T, c *core.Client, key string) {
	l := mustLock(t, c, key, core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
	waitClosed(t, l.Lost(), 5*time.Second, "Lost after the TTL")
	if !errors.Is(l.Err(), core.ErrLost) {
		t.Fatalf("Err after expiry: %v", l.Err())
	}
	// The server's expiry may trail the local one by a few milliseconds.
	mustRelease(t, lockSoon(t, c, key))
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
