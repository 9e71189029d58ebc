package cronlock_test

import (
	"context"
	"crypto/rand"
	"sort"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// TestMultiNodeRealRedis runs three real cron.Cron instances — each with
// its own Redis connection pool, core.Client, Locker and copy of the jobs,
// as three processes would — on one real Redis for several one-second
// ticks of an "@every 1s" job and a "* * * * * *" job. Every tick that a
// node fired ran exactly once in total, and the runs spread over the
// nodes.
func TestMultiNodeRealRedis(t *testing.T) {
	t.Parallel()
	admin := redistest.Client(t) // skips (or fails) without a Redis
	prefix := "cronlock-test-" + rand.Text()[:10]
	t.Cleanup(func() { deleteKeys(t, admin, prefix+":*") })

	jobs := []struct{ name, spec string }{
		{"every", "@every 1s"},
		{"spec", "* * * * * *"},
	}
	ran := map[string]*runs{"every": newRuns(), "spec": newRuns()}
	nodes := []string{"n1", "n2", "n3"}
	var crons []*cron.Cron
	var logs []*logRec
	for _, node := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
		t.Cleanup(func() { rdb.Close() })
		client := core.NewRedis(rdb, core.WithKeyPrefix(prefix)) // keys of this test run only
		t.Cleanup(func() { client.Close() })
		lg := &logRec{}
		l := cronlock.New(client, cronlock.WithNodeID(node), cronlock.WithLogger(lg), cronlock.WithSeconds())
		c := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
		for _, j := range jobs {
			if _, err := l.AddFunc(c, j.spec, j.name, ran[j.name].fn(node)); err != nil {
				t.Fatal(err)
			}
		}
		crons = append(crons, c)
		logs = append(logs, lg)
	}
	for _, c := range crons {
		c.Start()
	}
	time.Sleep(6500 * time.Millisecond) // six or seven ticks
	var stopped []context.Context
	for _, c := range crons {
		stopped = append(stopped, c.Stop())
	}
	for _, ctx := range stopped {
		<-ctx.Done()
	}

	byNode := map[string]int{}
	for _, j := range jobs {
		got := ran[j.name].snapshot()
		// Every tick some node planned: from the runs and the skips.
		fired := map[time.Time]bool{}
		for tk := range got {
			fired[tk] = true
		}
		for _, lg := range logs {
			for _, e := range lg.find("skip") {
				if e.value("job") == j.name {
					fired[e.value("planned").(time.Time).UTC()] = true
				}
			}
		}
		var ticks []time.Time
		for tk := range fired {
			ticks = append(ticks, tk)
		}
		sort.Slice(ticks, func(a, b int) bool { return ticks[a].Before(ticks[b]) })
		for _, tk := range ticks {
			if n := len(got[tk]); n != 1 {
				t.Errorf("%s: tick %v ran %d times (%v), want once", j.name, tk.Format("15:04:05"), n, got[tk])
				for i, lg := range logs {
					for _, e := range lg.find("") {
						if e.value("job") == j.name && e.value("planned").(time.Time).Equal(tk) {
							t.Logf("  %s: %s %v %v", nodes[i], e.msg, e.err, e.kv)
						}
					}
				}
			}
			for _, node := range got[tk] {
				byNode[node]++
			}
		}
		if len(ticks) < 4 {
			t.Errorf("%s: only %d ticks fired in 6.5 s", j.name, len(ticks))
		}
		for i := 1; i < len(ticks); i++ {
			if gap := ticks[i].Sub(ticks[i-1]); gap != time.Second {
				t.Logf("%s: no node fired between %v and %v (the process stalled; robfig/cron does not catch up)",
					j.name, ticks[i-1].Format("15:04:05"), ticks[i].Format("15:04:05"))
			}
		}
	}
	t.Logf("runs per node: %v", byNode)
	if len(byNode) < 2 {
		t.Errorf("all runs on one node: %v", byNode)
	}
	for i, lg := range logs {
		for _, e := range lg.find("") {
			if e.err != nil {
				t.Errorf("%s logged an error: %v %s %v", nodes[i], e.err, e.msg, e.kv)
			}
		}
	}
}

// deleteKeys removes the test's keys from the shared Redis.
func deleteKeys(t *testing.T, rdb *redis.Client, pattern string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, pattern, 100).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("scan %s: %v", pattern, err)
		return
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
