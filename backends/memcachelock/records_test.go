package memcachelock_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/core"
)

// A record ends by memcached's expiry: there for its TTL, gone within the
// rounding after it (expirySeconds: up to about three seconds more).
func TestRecordExpiresByMemcached(t *testing.T) {
	srv := startServer(t)
	r := newClient(t, newMC(t, srv)).Records()
	adaptertest.RecordExpires(t, r, "exp", time.Second, 5*time.Second)
}

// Eight nodes, each on a memcache.Client of its own, claim the same tick
// at once, for 20 ticks: exactly one claim of each succeeds (memcached's
// whole-second expiry is too coarse to race for an expired claim every
// round).
func TestClaimRace(t *testing.T) {
	srv := startServer(t)
	var nodes []*core.Records
	for range 8 {
		nodes = append(nodes, newClient(t, newMC(t, srv)).Records())
	}
	adaptertest.ClaimRace(t, nodes, 0)
}

// The clock-skew bound (adaptertest.ClaimWithinSkew): memcached has long
// dropped an item kept for just its window (and rounding) when b's clock
// says the tick is late; the claim is kept the skew longer, so b never
// wins.
func TestClaimWithinSkew(t *testing.T) {
	const skew = 5 * time.Second
	srv := startServer(t)
	a := newClient(t, newMC(t, srv), memcachelock.WithClockSkew(skew)).Records()
	b := newClient(t, newMC(t, srv), memcachelock.WithClockSkew(skew),
		memcachelock.WithClock(func() time.Time { return time.Now().Add(-skew) })).Records()
	adaptertest.ClaimWithinSkew(t, a, b, skew)
}

// A claim that memcached stored but whose answer came back after the
// deadline (by the claimer's clock, read after the add) is late, and
// taken back: nothing is left, and a claim in time afterwards succeeds.
func TestClaimLateAfterAdd(t *testing.T) {
	srv := startServer(t)
	planned := time.Now()
	late := newClient(t, newMC(t, srv), memcachelock.WithClock(adaptertest.AnsweredLate(planned))).Records()
	adaptertest.ClaimLateTakenBack(t, late, newClient(t, newMC(t, srv)).Records(), planned)
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
