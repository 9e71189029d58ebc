package cronlock_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/latchkey/latchkey/cronlock"
	"github.com/robfig/cron/v3"
)

// skewNode is a node whose clock is off true time by offset, and whose
// job starts delay after its own clock reaches the tick (a loaded machine).
type skewNode struct {
	id     string
	offset float64 // fraction of the interval; positive: ahead
	delay  float64 // fraction of the interval
}

// simulate fires ticks of sched on the nodes in true-time order, each Run
// at the true time its node's clock shows the tick plus its delay, and
// returns who ran which tick. Jobs take no time: the case where a
// lock released after the run lets a lagging node run the tick again.
func simulate(t *testing.T, sched cron.Schedule, loc *time.Location, nodes []skewNode, ticks int, opts ...cronlock.Option) (map[time.Time][]string, []time.Time) {
	t.Helper()
	w, rdb := newWorld(t)
	name := jobName(t)
	got := newRuns()

	aligned := cronlock.Aligned(sched)
	var planned []time.Time
	for tk := aligned.Next(base.In(loc)); len(planned) < ticks; tk = aligned.Next(tk) {
		planned = append(planned, tk)
	}
	interval := planned[1].Sub(planned[0])

	type event struct {
		at  time.Time
		job cron.Job
	}
	var events []event
	for _, n := range nodes {
		offset := time.Duration(n.offset * float64(interval))
		delay := time.Duration(n.delay * float64(interval))
		l, _, _ := newLocker(t, rdb, n.id, append([]cronlock.Option{
			cronlock.WithClock(w.clock(offset)), cronlock.WithLocation(loc),
		}, opts...)...)
		job, err := l.Job(name, sched, got.fn(n.id))
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range planned {
			events = append(events, event{at: tk.Add(delay - offset), job: job})
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	if events[0].at.Before(base) {
		t.Fatalf("first event %v before the simulation starts", events[0].at)
	}
	for _, e := range events {
		w.advanceTo(e.at)
		e.job.Run()
	}
	return got.snapshot(), planned
}

// TestSkewedClocksRunEachTickOnce: one node's clock runs ahead by almost
// half an interval, another lags by as much and starts late besides; the
// jobs finish at once. Every tick still runs exactly once — on the node
// that reached it first — for aligned "@every", seconds specs, and a daily
// spec in a time zone.
func TestSkewedClocksRunEachTickOnce(t *testing.T) {
	secs := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	mustParse := func(p cron.Parser, spec string) cron.Schedule {
		s, err := p.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tokyo := time.FixedZone("JST", 9*3600)
	tests := []struct {
		name  string
		sched cron.Schedule
		loc   *time.Location
	}{
		{"every10s", cron.Every(10 * time.Second), time.UTC},
		{"every90s", cron.Every(90 * time.Second), time.UTC},
		{"seconds-spec", mustParse(secs, "*/15 * * * * *"), time.UTC},
		{"minute-spec", mustParse(secs, "0 */5 * * * *"), time.UTC},
		{"daily-in-zone", mustParse(secs, "0 0 3 * * *"), tokyo},
	}
	nodes := []skewNode{
		{id: "ahead", offset: 0.45},
		{id: "exact", offset: 0, delay: 0.3},
		{id: "behind", offset: -0.45, delay: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, planned := simulate(t, tt.sched, tt.loc, nodes, 5)
			for _, tk := range planned {
				if ran := got[tk.UTC()]; !slices.Equal(ran, []string{"ahead"}) {
					t.Errorf("tick %v ran on %v, want once on the node that reached it first", tk, ran)
				}
			}
			if len(got) != len(planned) {
				t.Errorf("ran %d ticks, want %d: %v", len(got), len(planned), got)
			}
		})
	}
}

// TestSkewWithoutMinHoldRunsOnce: with WithMinHold(0) the claim's TTL
// ends at the next fire time, counted from the ahead node's early claim,
// yet the lagging, late node — whose claim reaches Redis after that — still
// skips: a claim lives until the end of its tick's window (the next fire
// time by Redis's clock). Before claims were judged against the window,
// this ran every tick twice.
func TestSkewWithoutMinHoldRunsOnce(t *testing.T) {
	nodes := []skewNode{
		{id: "ahead", offset: 0.45},
		{id: "behind", offset: -0.45, delay: 0.5},
	}
	got, planned := simulate(t, cron.Every(10*time.Second), time.UTC, nodes, 3, cronlock.WithMinHold(0))
	for _, tk := range planned {
		if ran := got[tk.UTC()]; !slices.Equal(ran, []string{"ahead"}) {
			t.Errorf("tick %v ran on %v, want once on ahead", tk, ran)
		}
	}
}

// TestClaimTTLOnRedis: the claim of a tick is held after the job returned,
// by the node that ran it, with a TTL on the Redis server of the interval
// plus the min hold; the running lease is gone.
func TestClaimTTLOnRedis(t *testing.T) {
	tests := []struct {
		name string
		opts []cronlock.Option
		want time.Duration
	}{
		{"default-min-hold", nil, 20 * time.Second},
		{"min-hold-3s", []cronlock.Option{cronlock.WithMinHold(3 * time.Second)}, 13 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, rdb := newWorld(t)
			name := jobName(t)
			l, client, _ := newLocker(t, rdb, "n1", append([]cronlock.Option{cronlock.WithClock(w.clock(0))}, tt.opts...)...)
			job, err := l.Job(name, cron.Every(10*time.Second), func(context.Context) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			w.advanceTo(base.Add(10*time.Second + 42*time.Millisecond))
			job.Run()

			ctx := context.Background()
			claimKey := "latchkey:{cron:" + name + ":" + itoa(base.Add(10*time.Second).Unix()) + "}:rec"
			holder, _ := rdb.Get(ctx, claimKey).Result()
			ttl, _ := rdb.PTTL(ctx, claimKey).Result()
			if holder != "n1" || ttl != tt.want {
				t.Errorf("claim held by %q with TTL %v, want n1 with %v", holder, ttl, tt.want)
			}
			running, err := client.Inspect(ctx, "cron:"+name+":running")
			if err != nil {
				t.Fatal(err)
			}
			if running.Held {
				t.Errorf("running lease still held after the run: %+v", running)
			}
		})
	}
}

// TestClaimSurvivesClientClose: closing a node's core.Client (a rolling
// deploy) must not free the claim of the tick it just ran: a node with a
// lagging clock that fires the tick afterwards must still skip it.
func TestClaimSurvivesClientClose(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	got := newRuns()
	la, clientA, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(2*time.Second)))
	lb, _, logsB := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)))
	ja, err := la.Job(name, cron.Every(10*time.Second), got.fn("a"))
	if err != nil {
		t.Fatal(err)
	}
	jb, err := lb.Job(name, cron.Every(10*time.Second), got.fn("b"))
	if err != nil {
		t.Fatal(err)
	}
	tick := base.Add(10 * time.Second)
	w.advanceTo(tick.Add(-2 * time.Second))
	ja.Run()
	clientA.Close() // a rolling deploy stops node a
	w.advanceTo(tick.Add(100 * time.Millisecond))
	jb.Run()
	if ran := got.snapshot()[tick]; !slices.Equal(ran, []string{"a"}) {
		t.Fatalf("tick ran on %v, want only on a\n%s", ran, logsB)
	}
	if len(logsB.find("skip")) != 1 {
		t.Errorf("b did not log its skip:\n%s", logsB)
	}
}
