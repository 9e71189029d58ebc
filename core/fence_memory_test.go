package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// fenceRetention mirrors core's: how long a fence counter lives from its
// seeding.
const fenceRetention = 5 * time.Minute

// staticMiniredis starts a miniredis whose clock moves only when the test
// moves it (TIME included).
func staticMiniredis(t *testing.T, now time.Time) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return mr, rdb
}

// TestReleasedKeysLeaveNothing: a thousand distinct keys, each locked and
// released, leave nothing in Redis once the fence retention has passed —
// memory does not grow with the number of distinct keys a day sees.
func TestReleasedKeysLeaveNothing(t *testing.T) {
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	mr, rdb := staticMiniredis(t, now)
	c := mustNew(core.NewRedis(rdb, core.WithAutoRenew(false)))
	defer c.Close()
	ctx := context.Background()
	for i := range 1000 {
		l, err := c.TryLock(ctx, fmt.Sprintf("order:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(mr.Keys()); n != 1000 {
		t.Fatalf("%d keys right after the releases, want the 1000 fence counters", n)
	}
	mr.FastForward(fenceRetention - time.Millisecond)
	if n := len(mr.Keys()); n != 1000 {
		t.Fatalf("%d keys just before the retention ends, want 1000", n)
	}
	mr.FastForward(time.Millisecond)
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("%d keys left after the retention, e.g. %q", len(keys), keys[0])
	}
}

// TestFencesRiseAcrossReseedAndClockSteps: fences of one key keep rising
// when the counter is reseeded (retention over, or Redis lost its data),
// when Redis comes back with a stale counter, and when the server clock
// steps back by less than the retention.
func TestFencesRiseAcrossReseedAndClockSteps(t *testing.T) {
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	mr, rdb := staticMiniredis(t, now)
	c := mustNew(core.NewRedis(rdb, core.WithAutoRenew(false)))
	defer c.Close()
	ctx := context.Background()
	var last int64
	take := func(what string) {
		t.Helper()
		l, err := c.TryLock(ctx, "sku:42", core.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.Fence() <= last {
			t.Fatalf("%s: fence %d after %d", what, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", what, err)
		}
	}
	take("first")
	for i := range 100 {
		take(fmt.Sprintf("acquisition %d", i))
	}
	// The clock steps back by nearly the retention while the counter lives.
	now = now.Add(-fenceRetention + time.Second)
	mr.SetTime(now)
	take("after the clock stepped back")
	// The counter expires (the clock moves on by the retention, from where
	// it stepped back to): the reseed is still above the old counter.
	mr.FastForward(fenceRetention)
	now = now.Add(fenceRetention)
	mr.SetTime(now)
	take("reseeded after the retention")
	take("counting again")
	// Redis comes back a second later with the counter of an earlier
	// snapshot (or a replica that lagged is promoted): below fences since.
	stale, err := mr.Get("latchkey:{sku:42}:fence")
	if err != nil {
		t.Fatal(err)
	}
	take("after the snapshot")
	take("after the snapshot, again")
	if err := mr.Set("latchkey:{sku:42}:fence", stale); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	mr.SetTime(now)
	take("after a restart that brought back a stale counter")
	// Redis restarts empty a little later.
	mr.FlushAll()
	now = now.Add(time.Millisecond)
	mr.SetTime(now)
	take("reseeded after data loss")
}

// TestFencesRiseAcrossLongClockStepBack: a counter the clock stepped back
// under, by far more than the retention, lives until the clock has passed
// it again, whoever takes the key meanwhile and however short their TTLs:
// a counter seeded from the clock after it would start below fences
// handed out. A mutex's acquisition of a free key (fresh_fence) once cut
// its life to the retention (an adversarial review found it); a write
// lock's takes next_fence.
func TestFencesRiseAcrossLongClockStepBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(c *core.Client) (*core.Lock, error)
	}{
		{"mutex", func(c *core.Client) (*core.Lock, error) {
			return c.TryLock(context.Background(), "job", core.WithTTL(10*time.Second))
		}},
		{"write lock", func(c *core.Client) (*core.Lock, error) {
			return c.RWMutex("job").TryLock(context.Background(), core.WithTTL(10*time.Second))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
			mr, rdb := staticMiniredis(t, now)
			c := mustNew(core.NewRedis(rdb, core.WithAutoRenew(false)))
			defer c.Close()
			var last int64
			take := func(what string) {
				t.Helper()
				l, err := tc.take(c)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if l.Fence() <= last {
					t.Fatalf("%s: fence %d after %d", what, l.Fence(), last)
				}
				last = l.Fence()
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("%s: release: %v", what, err)
				}
			}
			pass := func(d time.Duration) {
				mr.FastForward(d)
				now = now.Add(d)
				mr.SetTime(now)
			}
			take("first")
			now = now.Add(-6 * fenceRetention) // the clock steps back 30 minutes
			mr.SetTime(now)
			take("after the clock stepped back")
			for i := range 6 { // idle gaps longer than the retention, until the clock has passed the counter
				pass(fenceRetention + time.Minute)
				take(fmt.Sprintf("after idle gap %d", i+1))
			}
			// Once the clock is past every fence, the counter goes after
			// the retention again, and a counter seeded from the clock is
			// above them.
			pass(fenceRetention + time.Minute)
			if mr.Exists("latchkey:{job}:fence") {
				t.Error("the counter outlived the retention once the clock had passed it")
			}
			take("seeded from the clock")
		})
	}
}
