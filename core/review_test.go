package core_test

// Regression tests from the adversarial review of the per-lease deadlines
// (second round). Each failed before its fix.

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// WithToken re-entry in the same Client: two lease structs, one server lease.
func TestReviewTokenTwinToldMemory(t *testing.T) {
	ctx := context.Background()
	c := mustNew(core.NewMemory())
	defer c.Close()
	a, err := c.TryLock(ctx, "k", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "k", core.WithToken(a.Token()), core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.TryLock(ctx, "k", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatalf("rival: %v", err)
	}
	defer r.Release(ctx)
	select {
	case <-b.Lost():
	default:
		t.Errorf("rival took key (fence %d) while re-entered handle b (fence %d) was never told: b.Err()=%v", r.Fence(), b.Fence(), b.Err())
	}
	b.Release(ctx)
}

func TestReviewTokenTwinToldRedis(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := sharedRedis(t)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	c2 := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c2.Close()
	a, err := c.TryLock(ctx, "k", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "k", core.WithToken(a.Token()), core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a.Release(ctx)
	r, err := c2.TryLock(ctx, "k", core.WithTTL(3*time.Second))
	if err != nil {
		t.Fatalf("rival: %v", err)
	}
	defer r.Release(ctx)
	time.Sleep(10 * time.Millisecond)
	select {
	case <-b.Lost():
	default:
		t.Errorf("rival took key (fence %d) while re-entered handle b (fence %d) was never told", r.Fence(), b.Fence())
	}
	b.Release(ctx)
}

// Fence returned on re-entry after the fence counter expired.
func TestReviewReentryFenceAfterCounterExpiry(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Miniredis(t, false)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("pz")))
	defer c.Close()
	// seed counter long ago
	x, err := c.TryLock(ctx, "k", core.WithTTL(time.Hour), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	x.Release(ctx)
	mr.FastForward(24*time.Hour - time.Minute)
	a, err := c.TryLock(ctx, "k", core.WithTTL(time.Hour), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	mr.FastForward(2 * time.Minute)
	b, err := c.TryLock(ctx, "k", core.WithToken(a.Token()), core.WithTTL(time.Hour), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a fence %d, re-entered b fence %d", a.Fence(), b.Fence())
	if b.Fence() < a.Fence() { // never lower; higher once the counter was seeded again
		t.Errorf("re-entry reports fence %d, original %d", b.Fence(), a.Fence())
	}
	b.Release(ctx)
}

// A transient stall: three renewals hang for most of a third of the TTL
// each (then land). Their late answers confirm the lease, and the watchdog
// must go on renewing it. (TTL 1.2 s; the first renewal, sent 400 ms in,
// lands 600 ms late, at 1 s: well before the holder's deadline, 1.186 s,
// yet long after the watchdog gave it up, 267 ms in — at 300 ms / 188 ms,
// first written, it landed 8 ms before the deadline, and a loaded
// machine's scheduling lost the lease.)
func TestReviewLateAnswersKeepRenewing(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	kf := newKeyFault(t, rdb)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := context.Background()
	h, err := c.TryLock(ctx, "a", core.WithTTL(1200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	start := time.Now()
	kf.add(&faultRule{key: prefix + ":{a}", ttlMs: 1200, delay: 600 * time.Millisecond, onWire: true, times: 3})
	select {
	case <-h.Lost():
		info, _ := c.Inspect(ctx, "a")
		t.Errorf("lease reported lost after %v (%v) though Redis answered every renewal; server: held=%v ttl=%v",
			time.Since(start), h.Err(), info.Held, info.TTL)
	case <-time.After(6 * time.Second):
	}
}

// An acquisition whose call times out after the command was sent: the
// script still runs and sets a lease nobody holds, until its TTL.
func TestReviewTimedOutAcquireLeavesNothing(t *testing.T) {
	srv := redistest.StartServer(t, "--enable-debug-command", "yes")
	rdb := srv.Client(t) // ContextTimeoutEnabled
	admin := srv.Client(t)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("pz")))
	defer c.Close()
	bg := context.Background()
	// warm up (load script, dial)
	w, err := c.TryLock(bg, "warm")
	if err != nil {
		t.Fatal(err)
	}
	w.Release(bg)
	go admin.Do(bg, "debug", "sleep", "0.3")
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	_, err = c.TryLock(ctx, "k", core.WithTTL(time.Minute))
	cancel()
	t.Logf("TryLock: %v", err)
	time.Sleep(400 * time.Millisecond)
	info, _ := c.Inspect(bg, "k")
	if err == nil {
		t.Fatal("TryLock succeeded during DEBUG SLEEP: the test proves nothing")
	}
	if info.Held {
		t.Errorf("TryLock failed (%v) but a lease is held on the key for %v by a token nobody has", err, info.TTL)
	}
}
