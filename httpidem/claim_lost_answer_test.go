package httpidem_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The first claim of the day runs on Redis and its answer is lost;
// go-redis sends it again. A plain SET NX then failed: the only claimant
// was told "already claimed today", its handler never ran and the claim
// was never given back (review 14). The claim now knows its own token.
func TestClaimLostAnswerStillFirst(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  httpidem.DailyConfig
	}{
		{"gate", httpidem.DailyConfig{Scope: "vote"}},
		{"counted", httpidem.DailyConfig{Scope: "vote", Counted: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			admin := redistest.Client(t)
			px := faultnet.Start(t, admin.Options().Addr)
			rdb := redis.NewClient(&redis.Options{Addr: px.Addr()}) // default MaxRetries: resends
			defer rdb.Close()
			pfx := prefix(t)
			defer deleteKeys(admin, pfx)
			store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(pfx)))
			defer store.Close()
			cfg := mode.cfg
			cfg.Store = store
			g := must(httpidem.NewGate(cfg))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := g.Claim(ctx, "warmup", "poll-0"); err != nil { // loads the script: the armed call is an EVALSHA
				t.Fatal(err)
			}
			lost := px.LoseAnswer([]byte("evalsha"))
			first, err := g.Claim(ctx, "alice", "poll-1")
			n, cerr := g.Count(ctx, "poll-1", g.Today())
			t.Logf("answers lost %d; alice's claim: first=%v err=%v; count %d %v", lost(), first, err, n, cerr)
			if lost() != 1 {
				t.Fatal("no answer was lost: the case under test did not arise")
			}
			if err != nil || !first {
				t.Fatalf("alice's only claim of the day: first=%v err=%v, want the first", first, err)
			}
			if mode.cfg.Counted && n != 1 {
				t.Fatalf("count %d after one claim, want 1", n)
			}
			if again, err := g.Claim(ctx, "alice", "poll-1"); err != nil || again {
				t.Fatalf("alice's second claim: first=%v err=%v, want a duplicate", again, err)
			}
		})
	}
}
