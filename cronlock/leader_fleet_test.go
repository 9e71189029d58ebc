package cronlock_test

import (
	"context"
	"crypto/rand"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// leaderNode is one node of a fleet in leader mode, as a process would
// be: its own Redis connection pool, core.Client, Locker and cron.Cron.
type leaderNode struct {
	id    string
	l     *cronlock.Locker
	c     *cron.Cron
	logs  *logRec
	stall atomic.Int64 // unix ns until which its link holds every command
}

// TestLeaderMultiNodeRealRedis runs three nodes in leader mode on a real
// Redis with the jobs of TestMultiNodeRealRedis ("@every 1s" and
// "* * * * * *"), the leadership's TTL 2 s. One node leads and runs the
// ticks; then it stops its cron and closes its Locker (a graceful
// handover), and another node leads; then that node's Redis link stalls
// (its commands are held for 5 s: renewals fail as for a crashed node),
// its leadership is lost and the third node takes over once the lease
// expires. Throughout, no tick runs twice; each leader runs every tick
// from its first run to its last, skipping none; and runs go from one
// leader to the next and never back.
func TestLeaderMultiNodeRealRedis(t *testing.T) {
	t.Parallel()
	admin := redistest.Client(t) // skips (or fails) without a Redis
	prefix := "cronlock-test-" + rand.Text()[:10]
	t.Cleanup(func() { deleteKeys(t, admin, prefix+":*") })
	const ttl = 2 * time.Second

	ran := map[string]*runs{}
	for _, j := range fleetJobs {
		ran[j.name] = newRuns()
	}
	var nodes []*leaderNode
	for _, id := range []string{"n1", "n2", "n3"} {
		n := &leaderNode{id: id, logs: &logRec{}}
		rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, ReadTimeout: 10 * time.Second})
		rdb.AddHook(wireHook{hold: func([]redis.Cmder) bool {
			d := time.Until(time.Unix(0, n.stall.Load()))
			if d <= 0 {
				return false
			}
			time.Sleep(d)
			return true
		}})
		t.Cleanup(func() { rdb.Close() })
		client := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { client.Close() })
		n.l = mustNew(cronlock.New(client, cronlock.WithNodeID(id), cronlock.WithLogger(n.logs), cronlock.WithSeconds(),
			cronlock.WithLeader("fleet"), cronlock.WithLeaseTTL(ttl)))
		n.c = cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
		for _, j := range fleetJobs {
			if _, err := n.l.AddFunc(n.c, j.spec, j.name, ran[j.name].fn(id)); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { // before the Client's Close
			<-n.c.Stop().Done()
			if err := n.l.Close(context.Background()); err != nil {
				t.Errorf("%s: Close: %v", n.id, err)
			}
		})
		nodes = append(nodes, n)
	}

	// runsOf returns how many ticks node ran, of the job it ran least.
	runsOf := func(node string) int {
		least := -1
		for _, j := range fleetJobs {
			k := 0
			for _, by := range ran[j.name].snapshot() {
				for _, b := range by {
					if b == node {
						k++
					}
				}
			}
			if least < 0 || k < least {
				least = k
			}
		}
		return least
	}
	// leaderAmong waits until one of nodes leads and returns it.
	leaderAmong := func(what string, nodes ...*leaderNode) *leaderNode {
		t.Helper()
		var found *leaderNode
		waitFor(t, what, 15*time.Second, func() bool {
			for _, n := range nodes {
				if n.l.Leading() {
					found = n
					return true
				}
			}
			return false
		})
		return found
	}
	runMore := func(n *leaderNode, more int) {
		t.Helper()
		want := runsOf(n.id) + more
		waitFor(t, n.id+" running ticks", 15*time.Second, func() bool { return runsOf(n.id) >= want })
	}

	for _, n := range nodes {
		n.l.Start()
		n.c.Start()
	}
	l1 := leaderAmong("a first leader", nodes...)
	runMore(l1, 3)

	// Graceful handover: l1 stops its cron and resigns.
	<-l1.c.Stop().Done()
	if err := l1.l.Close(context.Background()); err != nil {
		t.Fatalf("%s: Close: %v", l1.id, err)
	}
	var rest []*leaderNode
	for _, n := range nodes {
		if n != l1 {
			rest = append(rest, n)
		}
	}
	l2 := leaderAmong("a leader after "+l1.id+" closed", rest...)
	runMore(l2, 3)

	// Lost leadership: l2's link stalls past the TTL, as a crashed node's.
	l2.stall.Store(time.Now().Add(5 * time.Second).UnixNano())
	var l3 *leaderNode
	for _, n := range rest {
		if n != l2 {
			l3 = n
		}
	}
	leaderAmong(l3.id+" leading after "+l2.id+" stalled", l3)
	runMore(l3, 3)
	for _, n := range nodes {
		<-n.c.Stop().Done()
	}

	t.Logf("leaders in turn: %s (closed), %s (stalled), %s", l1.id, l2.id, l3.id)
	order := map[string]int{l1.id: 1, l2.id: 2, l3.id: 3}
	for _, j := range fleetJobs {
		got := ran[j.name].snapshot()
		var ticks []time.Time
		for tk := range got {
			ticks = append(ticks, tk)
		}
		sort.Slice(ticks, func(a, b int) bool { return ticks[a].Before(ticks[b]) })
		first, last := map[string]time.Time{}, map[string]time.Time{}
		prev := 0
		for _, tk := range ticks {
			if n := len(got[tk]); n != 1 {
				t.Errorf("%s: tick %v ran %d times (%v), want once", j.name, tk.Format("15:04:05"), n, got[tk])
				continue
			}
			node := got[tk][0]
			if order[node] < prev {
				t.Errorf("%s: tick %v ran on %s after a later leader ran", j.name, tk.Format("15:04:05"), node)
			}
			prev = order[node]
			if _, ok := first[node]; !ok {
				first[node] = tk
			}
			last[node] = tk
		}
		t.Logf("%s: %d ticks ran; first and last run per node: %v %v", j.name, len(ticks), first, last)
		for _, n := range nodes {
			if _, ok := first[n.id]; !ok {
				t.Errorf("%s: %s never ran", j.name, n.id)
				continue
			}
			for _, e := range n.logs.find("skip") {
				tk, _ := e.value("planned").(time.Time)
				if e.value("job") == j.name && tk.After(first[n.id]) && tk.Before(last[n.id]) {
					t.Errorf("%s: leader %s skipped tick %v between its runs: %v", j.name, n.id, tk.Format("15:04:05"), e.kv)
				}
			}
			for tk := first[n.id]; tk.Before(last[n.id]); tk = tk.Add(time.Second) {
				if len(got[tk]) == 0 {
					t.Logf("%s: %s did not fire %v (the process stalled; robfig/cron does not catch up)", j.name, n.id, tk.Format("15:04:05"))
				}
			}
		}
	}
	for _, n := range []*leaderNode{l1, l3} {
		for _, e := range n.logs.find("") {
			if e.err != nil {
				t.Errorf("%s logged an error: %v %s %v", n.id, e.err, e.msg, e.kv)
			}
		}
	}
	if len(l2.logs.find("leadership lost")) != 1 {
		t.Errorf("%s did not log its loss once:\n%s", l2.id, l2.logs)
	}
}
