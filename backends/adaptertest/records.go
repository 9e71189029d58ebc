package adaptertest

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// ClaimRace has nodes — Records of Clients each on a connection of its
// own — claim the same tick at once, for 20 ticks: exactly one claim of
// each succeeds. With expireAfter > 0 each round also races for a claim
// whose earlier one (20 ms long) has expired, waiting expireAfter for the
// store to drop it first (0: a store whose expiry is too coarse for that
// skips it).
func ClaimRace(t *testing.T, nodes []*core.Records, expireAfter time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job := rand.Text()[:8]
	race := func(round int, what string, claim func(r *core.Records, node string) (bool, error)) {
		var won atomic.Int32
		var wg sync.WaitGroup
		for i, r := range nodes {
			wg.Go(func() {
				ok, err := claim(r, string(rune('a'+i)))
				if err != nil {
					t.Error(err)
				}
				if ok {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d, %s: %d claims succeeded, want 1", round, what, n)
		}
	}
	for round := range 20 {
		planned := time.Now()
		key := job + ":" + planned.Format(time.RFC3339Nano)
		race(round, "a fresh tick", func(r *core.Records, node string) (bool, error) {
			v, err := r.ClaimWithin(ctx, key, node, 2*time.Second, planned, time.Second)
			return v == core.Claimed, err
		})
		if expireAfter <= 0 {
			continue
		}
		old := key + ":old"
		if ok, err := nodes[0].Claim(ctx, old, "first", 20*time.Millisecond); err != nil || !ok {
			t.Fatalf("Claim: %v %v", ok, err)
		}
		time.Sleep(expireAfter)
		race(round, "an expired claim", func(r *core.Records, node string) (bool, error) {
			return r.Claim(ctx, old, node, time.Minute)
		})
	}
}

// ClaimWithinSkew checks the clock-skew bound of a store without a clock
// of its own (claims judged late by the claimer's clock, kept the declared
// skew past their window): b's clock is behind a's by skew. a claims the
// tick at once, with a one-millisecond TTL and a one-second window; b
// keeps claiming it until its own clock says it is late, skew after the
// window ended — long after a claim kept for just its window would have
// gone — and must never win.
func ClaimWithinSkew(t *testing.T, a, b *core.Records, skew time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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

// RecordExpires sets a record of ttl through r and checks that it can be
// read at once, is gone no earlier than ttl later, and is gone within
// within (the store's expiry, rounding included).
func RecordExpires(t *testing.T, r *core.Records, key string, ttl, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within+10*time.Second)
	defer cancel()
	start := time.Now()
	if err := r.Set(ctx, key, "v", ttl); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := r.Get(ctx, key); err != nil || !ok || v != "v" {
		t.Fatalf("Get at once: %q %v %v", v, ok, err)
	}
	for {
		_, ok, err := r.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Since(start) > within {
			t.Fatalf("a record of %v still there after %v", ttl, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(start); d < ttl {
		t.Fatalf("a record of %v gone after %v", ttl, d)
	}
}

// AnsweredLate returns a clock for a claimer: planned at its first
// reading (the claim is sent in time), two seconds later at every other
// (it is answered after a one-second window) — for ClaimLateTakenBack.
func AnsweredLate(planned time.Time) func() time.Time {
	var calls atomic.Int32
	return func() time.Time {
		if calls.Add(1) == 1 {
			return planned
		}
		return planned.Add(2 * time.Second)
	}
}

// ClaimLateTakenBack checks a store that judges claims by the claimer's
// clock: late, whose clock is AnsweredLate(planned), claims a tick of a
// one-second window and must hear it was late; other (a Client of its
// own) then finds no record left, and its claim in time succeeds.
func ClaimLateTakenBack(t *testing.T, late, other *core.Records, planned time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "slow:" + rand.Text()[:8]
	if v, err := late.ClaimWithin(ctx, key, "n1", time.Minute, planned, time.Second); err != nil || v != core.ClaimLate {
		t.Fatalf("a claim answered after the window: %v %v, want late", v, err)
	}
	if _, ok, err := other.Get(ctx, key); err != nil || ok {
		t.Fatalf("a late claim left a record: %v %v", ok, err)
	}
	if v, err := other.ClaimWithin(ctx, key, "n2", time.Minute, planned, time.Minute); err != nil || v != core.Claimed {
		t.Fatalf("a claim in time after the late one: %v %v", v, err)
	}
}
