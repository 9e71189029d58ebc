package core_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A claim whose answer is lost after Redis stored it is sent again by
// go-redis (MaxRetries, 3 by default). Claim's SET NX and ClaimWithin's
// script then found the claim and said it was taken: the only claimant
// was told another had it — cronlock skipped the tick on every node. A
// claim now knows its own id and is still claimed.
func TestClaimLostAnswerStillClaimed(t *testing.T) {
	run := func(t *testing.T, upstream string, admin redis.UniversalClient) {
		p := faultnet.Start(t, upstream)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis's default retries
		t.Cleanup(func() { rdb.Close() })
		prefix := redistest.Prefix(t, admin)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { c.Close() })
		r := c.Records()
		ctx := ctxFor(t, 20*time.Second)
		// Load the scripts first: the armed call is then the claim itself.
		if _, err := r.Claim(ctx, "warm", "x", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ClaimWithin(ctx, "warm-within", "x", time.Minute, time.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}

		lost := p.LoseAnswer([]byte("{job}:rec"))
		ok, err := r.Claim(ctx, "job", "node-a", time.Minute)
		t.Logf("Claim, its answer lost %d time(s): %v %v", lost(), ok, err)
		if lost() != 1 {
			t.Fatal("no answer was lost: the case under test did not arise")
		}
		if err != nil || !ok {
			t.Fatalf("the only claim of the key: %v %v, want claimed", ok, err)
		}
		if ok, err := r.Claim(ctx, "job", "node-b", time.Minute); ok || err != nil {
			t.Fatalf("another's claim after it: %v %v, want taken", ok, err)
		}

		lost = p.LoseAnswer([]byte("{tick}:rec"))
		v, err := r.ClaimWithin(ctx, "tick", "node-a", time.Minute, time.Now(), time.Minute)
		t.Logf("ClaimWithin, its answer lost %d time(s): %v %v", lost(), v, err)
		if lost() != 1 {
			t.Fatal("no answer was lost: the case under test did not arise")
		}
		if err != nil || v != core.Claimed {
			t.Fatalf("the only claim of the tick: %v %v, want Claimed", v, err)
		}
		if v, err := r.ClaimWithin(ctx, "tick", "node-b", time.Minute, time.Now(), time.Minute); v != core.ClaimTaken || err != nil {
			t.Fatalf("another's claim after it: %v %v, want ClaimTaken", v, err)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		mr, admin := redistest.Miniredis(t, false)
		run(t, mr.Addr(), admin)
	})
	t.Run("redis", func(t *testing.T) {
		admin := redistest.Client(t)
		run(t, redistest.Addr(t), admin)
	})
}
