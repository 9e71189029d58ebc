package locktest

// What a backend declares beyond the lease: a capability it lacks fails
// clearly; one it declares works. Records and claims (CapClaims), listing
// (CapList).

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// testUnsupportedFails: every capability the backend does not declare
// fails with ErrUnsupported when asked for, naming what is missing —
// never silently, never as contention.
func testUnsupportedFails(t *testing.T, c *core.Client, key string) {
	caps := c.Capabilities()
	checks := []struct {
		need core.Capability
		what string
		call func() error
	}{
		{core.CapFair, "TryLock WithFair", func() error {
			l, err := c.TryLock(ctxT(t), key, core.WithFair())
			if l != nil {
				mustRelease(t, l)
			}
			return err
		}},
		{core.CapPrimitives, "Semaphore.TryAcquire", func() error {
			l, err := c.Semaphore(key, 2).TryAcquire(ctxT(t))
			if l != nil {
				mustRelease(t, l)
			}
			return err
		}},
		{core.CapClaims, "Records.Set", func() error {
			return c.Records().Set(ctxT(t), key, "v", time.Second)
		}},
		{core.CapList, "Scan", func() error {
			for _, err := range c.Scan(ctxT(t), key) {
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	tested := 0
	for _, ck := range checks {
		if caps&ck.need != 0 {
			continue
		}
		tested++
		err := ck.call()
		if !errors.Is(err, core.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s without %s: got %v, want ErrUnsupported", ck.what, ck.need, err)
		}
		if err := c.Require(ck.need); !errors.Is(err, core.ErrUnsupported) {
			t.Errorf("Require(%s): got %v, want ErrUnsupported", ck.need, err)
		}
	}
	if err := c.Require(caps); err != nil {
		t.Errorf("Require of the declared capabilities %s: %v", caps, err)
	}
	if tested == 0 {
		t.Skipf("skipped: the backend declares every capability checked here (%s)", caps)
	}
}

// testRecords: Set and Get, a one-shot Claim, expiry by TTL, SetIfNewer's
// order.
func testRecords(t *testing.T, c *core.Client, key string) {
	skipUnless(t, c, core.CapClaims, "records and claims")
	r := c.Records()
	ctx := ctxT(t)
	if _, ok, err := r.Get(ctx, key); err != nil || ok {
		t.Fatalf("Get of nothing: ok %v, %v", ok, err)
	}
	if err := r.Set(ctx, key, "one", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := r.Get(ctx, key); err != nil || !ok || v != "one" {
		t.Fatalf("Get: %q %v %v, want one", v, ok, err)
	}
	claim := key + ":claim"
	if ok, err := r.Claim(ctx, claim, "a", 300*time.Millisecond); err != nil || !ok {
		t.Fatalf("first Claim: %v %v", ok, err)
	}
	if ok, err := r.Claim(ctx, claim, "b", time.Minute); err != nil || ok {
		t.Fatalf("second Claim: %v %v, want refused", ok, err)
	}
	if v, _, _ := r.Get(ctx, claim); v != "a" {
		t.Fatalf("the claim holds %q, want a", v)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := r.Claim(ctx, claim, "c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a claim did not expire with its TTL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ord := key + ":ord"
	for _, step := range []struct {
		value string
		order int64
		want  bool
	}{{"t2", 2, true}, {"t1", 1, false}, {"t2b", 2, true}, {"t3", 3, true}} {
		ok, err := r.SetIfNewer(ctx, ord, step.value, step.order, time.Minute)
		if err != nil || ok != step.want {
			t.Fatalf("SetIfNewer(%s, %d): %v %v, want %v", step.value, step.order, ok, err, step.want)
		}
	}
	if v, _, _ := r.Get(ctx, ord); v != "t3" {
		t.Fatalf("after SetIfNewer: %q, want t3", v)
	}
}

// testClaimWithin: one claim of a tick succeeds, a second is taken, and a
// claim after the window is late and stores nothing.
func testClaimWithin(t *testing.T, c *core.Client, key string) {
	skipUnless(t, c, core.CapClaims, "records and claims")
	r := c.Records()
	ctx := ctxT(t)
	planned := time.Now()
	if v, err := r.ClaimWithin(ctx, key, "n1", time.Minute, planned, 10*time.Second); err != nil || v != core.Claimed {
		t.Fatalf("first ClaimWithin: %v %v", v, err)
	}
	if v, err := r.ClaimWithin(ctx, key, "n2", time.Minute, planned, 10*time.Second); err != nil || v != core.ClaimTaken {
		t.Fatalf("second ClaimWithin: %v %v, want taken", v, err)
	}
	late := key + ":late"
	if v, err := r.ClaimWithin(ctx, late, "n1", time.Minute, planned.Add(-time.Minute), time.Second); err != nil || v != core.ClaimLate {
		t.Fatalf("ClaimWithin after the window: %v %v, want late", v, err)
	}
	if _, ok, err := r.Get(ctx, late); err != nil || ok {
		t.Fatalf("a late claim stored something: %v %v", ok, err)
	}
	// A claim lives at least until the window ends, whatever its TTL.
	short := key + ":short"
	if v, err := r.ClaimWithin(ctx, short, "n1", time.Millisecond, planned, 10*time.Second); err != nil || v != core.Claimed {
		t.Fatalf("ClaimWithin: %v %v", v, err)
	}
	time.Sleep(50 * time.Millisecond)
	if v, err := r.ClaimWithin(ctx, short, "n2", time.Minute, planned, 10*time.Second); err != nil || v != core.ClaimTaken {
		t.Fatalf("a claim expired before its window ended: %v %v", v, err)
	}
}

// testScan: a held lock is listed with its holder; a released one is not.
func testScan(t *testing.T, c *core.Client, key string) {
	skipUnless(t, c, core.CapList, "listing keys")
	l := mustLock(t, c, key, core.WithMetadata("scan-me"))
	found := func() (core.Info, bool) {
		for info, err := range c.Scan(ctxT(t), key) {
			if err != nil {
				t.Fatal(err)
			}
			if info.Key == key && info.Held {
				return info, true
			}
		}
		return core.Info{}, false
	}
	info, ok := found()
	if !ok || info.Token != l.Token() || info.Metadata != "scan-me" {
		t.Fatalf("Scan: %+v (found %v), want the holder %s", info, ok, l.Token())
	}
	mustRelease(t, l)
	if info, ok := found(); ok {
		t.Fatalf("Scan lists a released key: %+v", info)
	}
}
