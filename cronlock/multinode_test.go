package cronlock_test

import (
	"context"
	"crypto/rand"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// fleetNode is one node of a fleet: its clock's offset from true time
// (its cron fires by that clock too) and a hook on its Redis link.
type fleetNode struct {
	id     string
	offset time.Duration
	hook   redis.Hook
	opts   []cronlock.Option // more options for its Locker
}

// shifted is a schedule as read by a clock offset ahead of true time: it
// fires when that clock reaches the inner schedule's times.
type shifted struct {
	s      cron.Schedule
	offset time.Duration
}

func (s shifted) Next(t time.Time) time.Time { return s.s.Next(t.Add(s.offset)).Add(-s.offset) }

// fleetJobs are the jobs every node of a fleet runs.
var fleetJobs = []struct{ name, spec string }{
	{"every", "@every 1s"},
	{"spec", "* * * * * *"},
}

// fleet is the outcome of runFleet.
type fleet struct {
	ran  map[string]*runs // by job
	logs []*logRec        // by node
}

// runFleet runs real cron.Cron instances — one per node, each with its own
// Redis connection pool on addr, core.Client, Locker and copy of the
// fleetJobs, as separate processes would — until during returns, then
// stops them.
func runFleet(t *testing.T, addr, prefix string, nodes []fleetNode, during func()) fleet {
	t.Helper()
	secs := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	f := fleet{ran: map[string]*runs{}}
	for _, j := range fleetJobs {
		f.ran[j.name] = newRuns()
	}
	var crons []*cron.Cron
	for _, n := range nodes {
		// Commands wait for a stalled Redis rather than time out.
		rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second})
		if n.hook != nil {
			rdb.AddHook(n.hook)
		}
		t.Cleanup(func() { rdb.Close() })
		client := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix))) // keys of this test run only
		t.Cleanup(func() { client.Close() })
		lg := &logRec{}
		c := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
		offset := n.offset
		l := mustNew(cronlock.New(client, append([]cronlock.Option{cronlock.WithNodeID(n.id), cronlock.WithLogger(lg), cronlock.WithSeconds(),
			cronlock.WithLocation(time.UTC), cronlock.WithClock(func() time.Time { return time.Now().Add(offset) })}, n.opts...)...))
		for _, j := range fleetJobs {
			sched, err := secs.Parse(j.spec)
			if err != nil {
				t.Fatal(err)
			}
			job, err := l.Job(j.name, sched, f.ran[j.name].fn(n.id))
			if err != nil {
				t.Fatal(err)
			}
			c.Schedule(shifted{cronlock.Aligned(sched), offset}, job)
		}
		crons = append(crons, c)
		f.logs = append(f.logs, lg)
	}
	for _, c := range crons {
		c.Start()
	}
	during()
	var stopped []context.Context
	for _, c := range crons {
		stopped = append(stopped, c.Stop())
	}
	for _, ctx := range stopped {
		<-ctx.Done()
	}
	return f
}

// ticks returns, for job, the ticks some node planned — from the runs and
// the skips — in order, and who ran each.
func (f fleet) ticks(job string) ([]time.Time, map[time.Time][]string) {
	got := f.ran[job].snapshot()
	fired := map[time.Time]bool{}
	for tk := range got {
		fired[tk] = true
	}
	for _, lg := range f.logs {
		for _, e := range lg.find("skip") {
			if e.value("job") == job {
				fired[e.value("planned").(time.Time).UTC()] = true
			}
		}
	}
	var ticks []time.Time
	for tk := range fired {
		ticks = append(ticks, tk)
	}
	sort.Slice(ticks, func(a, b int) bool { return ticks[a].Before(ticks[b]) })
	return ticks, got
}

// explain logs what every node logged about job's tick tk.
func (f fleet) explain(t *testing.T, nodes []fleetNode, job string, tk time.Time) {
	t.Helper()
	for i, lg := range f.logs {
		for _, e := range lg.find("") {
			if e.value("job") == job && e.value("planned").(time.Time).Equal(tk) {
				t.Logf("  %s: %s %v %v", nodes[i].id, e.msg, e.err, e.kv)
			}
		}
	}
}

// TestMultiNodeRealRedis runs three real cron.Cron instances — each with
// its own Redis connection pool, core.Client, Locker and copy of the jobs,
// as three processes would — on one real Redis for several one-second
// ticks of an "@every 1s" job and a "* * * * * *" job. Every tick that a
// node fired ran exactly once in total, and the runs spread over the
// nodes (WithSpread): the node that ran a tick lets another claim the
// next, so a node runs two ticks of a job in a row at most once (the
// others may be slow to claim on a busy machine).
func TestMultiNodeRealRedis(t *testing.T) {
	t.Parallel()
	admin := redistest.Client(t) // skips (or fails) without a Redis
	prefix := "cronlock-test-" + rand.Text()[:10]
	t.Cleanup(func() { deleteKeys(t, admin, prefix+":*") })

	nodes := []fleetNode{{id: "n1"}, {id: "n2"}, {id: "n3"}}
	f := runFleet(t, admin.Options().Addr, prefix, nodes, func() {
		time.Sleep(6500 * time.Millisecond) // six or seven ticks
	})

	byNode := map[string]int{}
	for _, j := range fleetJobs {
		ticks, got := f.ticks(j.name)
		for _, tk := range ticks {
			if n := len(got[tk]); n != 1 {
				t.Errorf("%s: tick %v ran %d times (%v), want once", j.name, tk.Format("15:04:05"), n, got[tk])
				f.explain(t, nodes, j.name, tk)
			}
			for _, node := range got[tk] {
				byNode[node]++
			}
		}
		if len(ticks) < 4 {
			t.Errorf("%s: only %d ticks fired in 6.5 s", j.name, len(ticks))
		}
		repeats := 0
		for i := 1; i < len(ticks); i++ {
			a, b := got[ticks[i-1]], got[ticks[i]]
			if len(a) == 1 && len(b) == 1 && a[0] == b[0] {
				repeats++
			}
		}
		if repeats > 1 {
			t.Errorf("%s: a node ran the next tick too %d times; runners %v", j.name, repeats, got)
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
	for i, lg := range f.logs {
		for _, e := range lg.find("") {
			if e.err != nil {
				t.Errorf("%s logged an error: %v %s %v", nodes[i].id, e.err, e.msg, e.kv)
			}
		}
	}
}

// TestMultiNodeStalls runs the fleet of TestMultiNodeRealRedis through a
// 3 s stall that begins 200 ms before a tick T of the one-second jobs —
// longer than the claim's TTL (interval + min hold: 2 s):
//
//   - stalled-link: one node's commands are held on the way to Redis (a
//     go-redis hook), so its claim of T reaches Redis at T+2.8 s, after the
//     other nodes' claim of T expired;
//   - stalled-redis: the nodes' clocks (and crons) are 0.4 s apart, and a
//     private redis-server is stopped (SIGSTOP) just after the node ahead
//     claimed T: the other nodes' claims of T are served at T+2.8 s, after
//     that claim expired.
//
// Each planned tick must run at most once. Before claims were refused
// when they reached Redis after the tick's window, T ran twice in both.
func TestMultiNodeStalls(t *testing.T) {
	t.Parallel()
	const stall = 3 * time.Second
	// stallAt waits until 200 ms before a whole second at least 2 s away
	// and returns that tick.
	stallAt := func() time.Time {
		tick := time.Now().Truncate(time.Second).Add(3 * time.Second)
		time.Sleep(time.Until(tick.Add(-200 * time.Millisecond)))
		return tick
	}
	tests := []struct {
		name string
		run  func(t *testing.T) ([]fleetNode, fleet, time.Time)
	}{
		{"stalled-link", func(t *testing.T) ([]fleetNode, fleet, time.Time) {
			admin := redistest.Client(t) // skips (or fails) without a Redis
			prefix := "cronlock-test-" + rand.Text()[:10]
			t.Cleanup(func() { deleteKeys(t, admin, prefix+":*") })
			var mu sync.Mutex
			var from, until time.Time
			link := wireHook{hold: func([]redis.Cmder) bool {
				mu.Lock()
				now := time.Now()
				held := !now.Before(from) && now.Before(until)
				d := until.Sub(now)
				mu.Unlock()
				if held {
					time.Sleep(d)
				}
				return held
			}}
			nodes := []fleetNode{{id: "n1"}, {id: "n2", hook: link}, {id: "n3"}}
			var tick time.Time
			f := runFleet(t, admin.Options().Addr, prefix, nodes, func() {
				tick = stallAt()
				mu.Lock()
				from, until = time.Now(), time.Now().Add(stall)
				mu.Unlock()
				time.Sleep(time.Until(tick.Add(5 * time.Second)))
			})
			return nodes, f, tick
		}},
		{"stalled-redis", func(t *testing.T) ([]fleetNode, fleet, time.Time) {
			srv := redistest.StartServer(t)
			nodes := []fleetNode{
				{id: "ahead", offset: 400 * time.Millisecond},
				{id: "exact"},
				{id: "behind", offset: -400 * time.Millisecond},
			}
			var tick time.Time
			f := runFleet(t, srv.Addr(), "cronlock-test", nodes, func() {
				tick = stallAt()
				srv.Pause(t)
				time.Sleep(stall)
				srv.Resume(t)
				time.Sleep(time.Until(tick.Add(5 * time.Second)))
			})
			return nodes, f, tick
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nodes, f, stalled := tt.run(t)
			late := 0
			for _, j := range fleetJobs {
				ticks, got := f.ticks(j.name)
				for _, tk := range ticks {
					if n := len(got[tk]); n > 1 {
						t.Errorf("%s: tick %v ran %d times (%v), want at most once", j.name, tk.Format("15:04:05.000"), n, got[tk])
						f.explain(t, nodes, j.name, tk)
					}
				}
				if after := stalled.Add(stall); len(got[after.UTC()]) == 0 && len(got[after.Add(time.Second).UTC()]) == 0 {
					t.Errorf("%s: neither tick after the stall ran: %v", j.name, got)
				}
				for _, lg := range f.logs {
					for _, e := range lg.find("skip") {
						if e.value("job") == j.name && e.value("window") != nil {
							late++
						}
					}
				}
			}
			if late == 0 { // the stall must have made some claim late
				t.Errorf("no claim was refused as late around the stall at %v", stalled.Format("15:04:05.000"))
			}
		})
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
