package memcachelock_test

import (
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/core"
)

// A record ends by memcached's expiry: there for its TTL, gone within the
// rounding after it (expirySeconds: up to about three seconds more).
func TestRecordExpiresByMemcached(t *testing.T) {
	srv := startServer(t)
	r := newClient(t, newMC(t, srv)).Records()
	ctx := ctxT(t)
	start := time.Now()
	if err := r.Set(ctx, "exp", "v", time.Second); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := r.Get(ctx, "exp"); err != nil || !ok || v != "v" {
		t.Fatalf("Get at once: %q %v %v", v, ok, err)
	}
	for {
		_, ok, err := r.Get(ctx, "exp")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("a record of one second still there after five")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("a record of one second gone after %v", d)
	}
}

// Eight nodes, each on a memcache.Client of its own, claim the same tick
// at once, for 20 ticks: exactly one claim of each succeeds.
func TestClaimRace(t *testing.T) {
	srv := startServer(t)
	var nodes []*core.Records
	for range 8 {
		nodes = append(nodes, newClient(t, newMC(t, srv)).Records())
	}
	ctx := ctxT(t)
	job := rand.Text()[:8]
	for round := range 20 {
		planned := time.Now()
		key := job + ":" + planned.Format(time.RFC3339Nano)
		var won atomic.Int32
		var wg sync.WaitGroup
		for i, r := range nodes {
			wg.Go(func() {
				v, err := r.ClaimWithin(ctx, key, string(rune('a'+i)), 2*time.Second, planned, time.Second)
				if err != nil {
					t.Error(err)
				}
				if v == core.Claimed {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d claims of one tick succeeded, want 1", round, n)
		}
	}
}

// The clock-skew bound: node b's clock is behind node a's by the declared
// skew. a claims the tick at once, with a one-millisecond TTL and a
// one-second window; b keeps claiming it until its own clock says it is
// late. Its clock says it is in time until five seconds after the window
// ended, and memcached has long dropped an item kept for just its window
// (and rounding) by then: the claim is kept the skew longer, so b never
// wins.
func TestClaimWithinSkew(t *testing.T) {
	const skew = 5 * time.Second
	srv := startServer(t)
	a := newClient(t, newMC(t, srv), memcachelock.WithClockSkew(skew)).Records()
	b := newClient(t, newMC(t, srv), memcachelock.WithClockSkew(skew),
		memcachelock.WithClock(func() time.Time { return time.Now().Add(-skew) })).Records()
	ctx := ctxT(t)
	planned := time.Now()
	key := "skew:" + rand.Text()[:8]
	if v, err := a.ClaimWithin(ctx, key, "a", time.Millisecond, planned, time.Second); err != nil || v != core.Claimed {
		t.Fatalf("a's claim: %v %v", v, err)
	}
	for {
		v, err := b.ClaimWithin(ctx, key, "b", time.Millisecond, planned, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch v {
		case core.Claimed:
			t.Fatalf("b claimed the tick %v after a, its clock %v behind", time.Since(planned), skew)
		case core.ClaimLate:
			if d := time.Since(planned); d < time.Second+skew {
				t.Fatalf("b late after %v, before its clock passed the window", d)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A claim that memcached stored but whose answer came back after the
// deadline (by the claimer's clock, read after the add) is late, and
// taken back: nothing is left, and a claim in time afterwards succeeds.
func TestClaimLateAfterAdd(t *testing.T) {
	srv := startServer(t)
	planned := time.Now()
	var calls atomic.Int32
	late := newClient(t, newMC(t, srv), memcachelock.WithClock(func() time.Time {
		if calls.Add(1) == 1 {
			return planned // sent in time…
		}
		return planned.Add(2 * time.Second) // …answered after the window
	})).Records()
	ctx := ctxT(t)
	if v, err := late.ClaimWithin(ctx, "slow", "n1", time.Minute, planned, time.Second); err != nil || v != core.ClaimLate {
		t.Fatalf("a claim answered after the window: %v %v, want late", v, err)
	}
	r := newClient(t, newMC(t, srv)).Records()
	if _, ok, err := r.Get(ctx, "slow"); err != nil || ok {
		t.Fatalf("a late claim left a record: %v %v", ok, err)
	}
	if v, err := r.ClaimWithin(ctx, "slow", "n2", time.Minute, planned, time.Minute); err != nil || v != core.Claimed {
		t.Fatalf("a claim in time after the late one: %v %v", v, err)
	}
}

// Records live in items of their own: a record and a lock of the same key
// do not see each other.
func TestRecordsApartFromLeases(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, newMC(t, srv))
	ctx := ctxT(t)
	if ok, err := c.Records().Claim(ctx, "same", "rec", time.Minute); err != nil || !ok {
		t.Fatalf("Claim: %v %v", ok, err)
	}
	l, err := c.TryLock(ctx, "same")
	if err != nil {
		t.Fatalf("TryLock beside a record: %v", err)
	}
	defer l.Release(ctx)
	if v, ok, err := c.Records().Get(ctx, "same"); err != nil || !ok || v != "rec" {
		t.Fatalf("the record beside a lock: %q %v %v", v, ok, err)
	}
}
