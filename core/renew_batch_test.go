package core_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Renewals due together run as one script per server (per Cluster slot),
// not one per lease: 40 leases renewed over several rounds cost a few
// scripts a round, every lease stays held, and each is extended to its
// whole TTL again. The leases are taken a group at a time (TryLockAll, one
// script per group), so that each group's renewals fall due together
// however slow the machine: taken one by one on a loaded machine, leases
// fall due more than the batching window apart and rightly go in batches
// of their own.
func TestRenewalsBatched(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient, prefix string, groups [][]string, maxPerRound int) {
		hook := &scriptCounter{}
		rdb.AddHook(hook)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		ctx := ctxFor(t, 20*time.Second)
		const ttl = 600 * time.Millisecond
		var locks []*core.Lock
		for _, keys := range groups {
			g, err := c.TryLockAll(ctx, keys, core.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, g.Locks()...)
		}
		hook.take()
		const rounds = 4 // renewals come every ttl/3
		time.Sleep(rounds*ttl/3 + ttl/6)
		scripts := hook.take()
		for _, l := range locks {
			select {
			case <-l.Lost():
				t.Fatalf("%s lost: %v", l.Key(), l.Err())
			default:
			}
			info, err := c.Inspect(ctx, l.Key())
			if err != nil || !info.Held || info.Token != l.Token() {
				t.Fatalf("%s: %+v, %v", l.Key(), info, err)
			}
		}
		t.Logf("%d leases, %d renewal rounds: %d scripts", len(locks), rounds, scripts)
		if scripts > rounds*maxPerRound+maxPerRound {
			t.Errorf("%d scripts for %d leases over %d rounds: want at most %d a round", scripts, len(locks), rounds, maxPerRound)
		}
		for _, l := range locks {
			l.Release(ctx)
		}
	}
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		run(t, rdb, redistest.Prefix(t, rdb), [][]string{keys}, 3)
	})
	if testing.Short() {
		return
	}
	t.Run("cluster", func(t *testing.T) {
		rdb := redistest.StartCluster(t, 3).Client(t)
		// 40 keys under 4 hash tags: 4 slots, so at most 4 scripts a
		// round (plus stragglers); without batching it would be 40.
		groups := make([][]string, 4)
		for i := range 40 {
			groups[i%4] = append(groups[i%4], fmt.Sprintf("t%d}k%d", i%4, i))
		}
		run(t, rdb, "latchkey", groups, 8)
	})
}
