package cronlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/robfig/cron/v3"
)

// runLog records the runs of a job in the order they started.
type runLog struct {
	mu   sync.Mutex
	runs []cronlock.Tick
	from time.Time // offsets are printed from here
}

// fn returns a job function that records its tick.
func (r *runLog) fn() func(context.Context) error {
	return func(ctx context.Context) error {
		tick, ok := cronlock.TickFromContext(ctx)
		if !ok {
			return errors.New("no tick in context")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.runs = append(r.runs, tick)
		return nil
	}
}

// String lists the runs as "node:seconds", seconds from r.from, with a "*"
// for a catch-up run: "a:10 a:50* a:60* a:70".
func (r *runLog) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, t := range r.runs {
		s := fmt.Sprintf("%s:%d", t.Node, int(t.Planned.Sub(r.from)/time.Second))
		if t.CatchUp {
			s += "*"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// missObs is an Observer and a MissedObserver that keeps each tick with
// how it ended, in the order the ticks started.
type missObs struct {
	mu     sync.Mutex
	ticks  []*obsTick
	missed []cronlock.MissedTicks
}

type obsTick struct {
	tick cronlock.Tick
	res  cronlock.TickResult
}

func (o *missObs) TickStart(ctx context.Context, t cronlock.Tick) (context.Context, func(cronlock.TickResult)) {
	ot := &obsTick{tick: t}
	o.mu.Lock()
	o.ticks = append(o.ticks, ot)
	o.mu.Unlock()
	return ctx, func(r cronlock.TickResult) {
		o.mu.Lock()
		ot.res = r
		o.mu.Unlock()
	}
}

// catchUps returns the catch-up ticks seen, in the order they started.
func (o *missObs) catchUps() []obsTick {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []obsTick
	for _, ot := range o.ticks {
		if ot.tick.CatchUp {
			out = append(out, *ot)
		}
	}
	return out
}

func (o *missObs) TicksMissed(_ context.Context, m cronlock.MissedTicks) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.missed = append(o.missed, m)
}

func (o *missObs) misses() []cronlock.MissedTicks {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]cronlock.MissedTicks(nil), o.missed...)
}

// TestMissedPolicies: a job "@every 10s" ran its tick of :10; then the
// process was paused (or the fleet down) until just after :70, so the
// ticks :20 to :60 were missed. The run of :70 looks back and, before it
// runs, catches up what the policy says — with and without WithSpread,
// whose read of the record it reuses. Catch-up runs say so in their Tick
// and in LastRun; the look-back is logged and told to the observer.
func TestMissedPolicies(t *testing.T) {
	tests := []struct {
		name    string
		policy  cronlock.Missed
		want    string
		catchUp int // of the 5 missed
	}{
		{"skip", cronlock.MissedSkip(), "a:10 a:70", -1},
		{"once", cronlock.MissedRunOnce(), "a:10 a:60* a:70", 1},
		{"all-3", cronlock.MissedRunAll(3), "a:10 a:40* a:50* a:60* a:70", 3},
		{"all-10", cronlock.MissedRunAll(10), "a:10 a:20* a:30* a:40* a:50* a:60* a:70", 5},
		{"once-within-5s", cronlock.MissedRunOnce().Within(5 * time.Second), "a:10 a:70", 0},
		{"all-within-25s", cronlock.MissedRunAll(10).Within(25 * time.Second), "a:10 a:50* a:60* a:70", 2},
	}
	for _, tt := range tests {
		for _, spread := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/spread=%v", tt.name, spread), func(t *testing.T) {
				w, rdb := newWorld(t)
				name := jobName(t)
				obs := &missObs{}
				l, _, logs := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)), cronlock.WithMissed(tt.policy),
					cronlock.WithSpread(spread), cronlock.WithObserver(obs))
				got := &runLog{from: base}
				j := mustJob(t, l, name, cron.Every(10*time.Second), got.fn())
				w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
				j.Run()
				w.advanceTo(base.Add(70*time.Second + 100*time.Millisecond))
				j.Run()

				if got.String() != tt.want {
					t.Errorf("runs %q, want %q\n%s", got, tt.want, logs)
				}
				missed := logs.find("missed")
				if tt.catchUp < 0 {
					if len(missed) != 0 || len(obs.misses()) != 0 {
						t.Errorf("MissedSkip looked back: %v %v", missed, obs.misses())
					}
					return
				}
				first, last := base.Add(20*time.Second), base.Add(60*time.Second)
				want := cronlock.MissedTicks{Name: name, Node: "a", First: first, Last: last, Count: 5, CatchUp: tt.catchUp, Policy: tt.policy}
				if m := obs.misses(); len(m) != 1 || m[0].Name != want.Name || m[0].Node != want.Node || !m[0].First.Equal(first) ||
					!m[0].Last.Equal(last) || m[0].Count != 5 || m[0].CatchUp != tt.catchUp || m[0].Policy != tt.policy {
					t.Errorf("observer told %+v, want %+v", m, want)
				}
				if len(missed) != 1 || missed[0].value("count") != 5 || missed[0].value("catch_up") != tt.catchUp ||
					missed[0].value("policy") != tt.policy.String() {
					t.Errorf("missed log: %s", logs)
				}
				catchUps := obs.catchUps()
				for _, ot := range catchUps {
					if r := ot.res; r.Outcome != cronlock.OutcomeRan || !r.Locked || r.Fence <= 0 {
						t.Errorf("catch-up tick %v ended %+v", ot.tick.Planned, r)
					}
				}
				if len(catchUps) != tt.catchUp {
					t.Errorf("%d catch-up ticks observed, want %d", len(catchUps), tt.catchUp)
				}
				run, err := l.LastRun(context.Background(), name)
				if err != nil || !run.Planned.Equal(base.Add(70*time.Second)) || run.CatchUp {
					t.Errorf("LastRun = %+v, %v", run, err)
				}
			})
		}
	}
}

// TestMissedNoRecord: a job with no LastRun record — new, or whose record
// expired — has no missed ticks: its first tick runs alone.
func TestMissedNoRecord(t *testing.T) {
	w, rdb := newWorld(t)
	l, _, logs := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)), cronlock.WithMissed(cronlock.MissedRunAll(10)))
	got := &runLog{from: base}
	j := mustJob(t, l, jobName(t), cron.Every(10*time.Second), got.fn())
	w.advanceTo(base.Add(70 * time.Second))
	j.Run()
	if got.String() != "a:70" || len(logs.find("missed")) != 0 {
		t.Errorf("runs %q\n%s", got, logs)
	}
}

// TestMissedAtStart: the fleet ran the tick of :10, then was down until
// :65. When a node's cron starts, the one-shot entry that AddFunc added
// looks back at once — without waiting for the next tick — and catches up
// :20 to :60. A second node whose cron starts later finds nothing missed.
// With MissedSkip, AddFunc adds no such entry.
func TestMissedAtStart(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	got := &runLog{from: base}
	newNode := func(node string, m cronlock.Missed) (*cron.Cron, cron.EntryID, *logRec) {
		l, _, logs := newLocker(t, rdb, node, cronlock.WithClock(w.clock(0)), cronlock.WithMissed(m))
		c := cron.New()
		id, err := l.AddFunc(c, "@every 10s", name, got.fn())
		if err != nil {
			t.Fatal(err)
		}
		return c, id, logs
	}
	skip, _, _ := newNode("s", cronlock.MissedSkip())
	if n := len(skip.Entries()); n != 1 {
		t.Errorf("MissedSkip: %d cron entries, want 1", n)
	}
	ca, id, logsA := newNode("a", cronlock.MissedRunAll(10))
	if n := len(ca.Entries()); n != 2 {
		t.Fatalf("%d cron entries, want the job and its look-back", n)
	}
	w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
	ca.Entry(id).Job.Run() // what a's cron does at :10
	w.advanceTo(base.Add(65 * time.Second))

	ca.Start()
	waitFor(t, "the catch-up at the cron's start", 10*time.Second, func() bool { return strings.Count(got.String(), "*") == 5 })
	<-ca.Stop().Done()
	if want := "a:10 a:20* a:30* a:40* a:50* a:60*"; got.String() != want {
		t.Errorf("runs %q, want %q\n%s", got, want, logsA)
	}
	cb, _, logsB := newNode("b", cronlock.MissedRunAll(10))
	cb.Start()
	waitFor(t, "b's look-back", 10*time.Second, func() bool { return cb.Entries()[0].Next.IsZero() || cb.Entries()[1].Next.IsZero() })
	<-cb.Stop().Done()
	if want := "a:10 a:20* a:30* a:40* a:50* a:60*"; got.String() != want || len(logsB.find("missed")) != 0 {
		t.Errorf("after b started: runs %q, want %q\n%s", got, want, logsB)
	}
}

// TestMissedNeverTwice: three nodes look back at once (Locker.CatchUp) for
// the same missed ticks: each runs once in all — the running lease lets one
// node catch up at a time and the others defer. Then a node looks back from
// a stale record, as if it had read it before the catch-up runs were
// recorded: every tick it finds is claimed already, and it runs none.
func TestMissedNeverTwice(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	got := &runLog{from: base}
	var lockers []*cronlock.Locker
	for _, node := range []string{"a", "b", "c"} {
		l, _, _ := newLocker(t, rdb, node, cronlock.WithClock(w.clock(0)), cronlock.WithMissed(cronlock.MissedRunAll(10)))
		mustJob(t, l, name, cron.Every(10*time.Second), got.fn())
		lockers = append(lockers, l)
	}
	j := mustJob(t, lockers[0], name, cron.Every(10*time.Second), got.fn())
	w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
	j.Run()
	lastKey := "latchkey:{cron:" + name + ":last}:rec"
	stale, err := w.mr.Get(lastKey)
	if err != nil {
		t.Fatal(err)
	}
	w.advanceTo(base.Add(45 * time.Second))

	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Go(func() {
			if err := l.CatchUp(context.Background()); err != nil {
				t.Errorf("CatchUp: %v", err)
			}
		})
	}
	wg.Wait()
	runs := strings.Fields(got.String())
	if len(runs) != 4 {
		t.Fatalf("runs %q, want :10 then :20, :30 and :40 caught up once each", got)
	}
	for i, want := range []string{":10", ":20*", ":30*", ":40*"} {
		if !strings.HasSuffix(runs[i], want) {
			t.Errorf("run %d is %q, want %q (runs %q)", i, runs[i], want, got)
		}
	}

	w.mr.Set(lastKey, stale) // a look-back that read the record before
	w.mr.Set(lastKey+":ord", itoa(base.Add(10*time.Second).UnixMilli()))
	if err := lockers[1].CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(got.String())); n != 4 {
		t.Errorf("a tick was caught up twice: %q", got)
	}
}

// TestMissedOptions: invalid policies are ErrInvalidOption; every policy
// has its name.
func TestMissedOptions(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	for _, m := range []cronlock.Missed{cronlock.MissedRunAll(0), cronlock.MissedRunAll(-1), cronlock.MissedRunOnce().Within(-time.Second)} {
		if _, err := cronlock.New(client, cronlock.WithMissed(m)); !errors.Is(err, cronlock.ErrInvalidOption) {
			t.Errorf("WithMissed(%v): %v, want ErrInvalidOption", m, err)
		}
	}
	for m, want := range map[cronlock.Missed]string{
		{}:                        "skip",
		cronlock.MissedSkip():     "skip",
		cronlock.MissedRunOnce():  "once",
		cronlock.MissedRunAll(24): "all(24)",
		cronlock.MissedRunAll(24).Within(time.Hour): "all(24) within 1h0m0s",
	} {
		if got := m.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", m, got, want)
		}
	}
}

// TestMissedLeader: in leader mode (WithLeader, MissedRunAll), the ticks
// no node ran while no node led are caught up by the next leader as soon
// as it leads — without waiting for the job's next tick — under its
// leadership's fence; and a leader whose process was paused through ticks
// catches them up at its next tick, before running it.
func TestMissedLeader(t *testing.T) {
	t.Run("takeover-gap", func(t *testing.T) {
		w, rdb := newWorld(t)
		name, election := jobName(t), "e-"+jobName(t)
		got := &runLog{from: base}
		all := cronlock.WithMissed(cronlock.MissedRunAll(10))
		la, _, _ := newLeader(t, rdb, "a", election, w, all)
		lb, obsB, logsB := newLeader(t, rdb, "b", election, w, all, cronlock.WithOverlap(cronlock.OverlapWait))
		ja := mustJob(t, la, name, cron.Every(10*time.Second), got.fn())
		jb := mustJob(t, lb, name, cron.Every(10*time.Second), got.fn())
		startLeading(t, la)
		w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
		ja.Run()
		if err := la.Close(context.Background()); err != nil { // a goes; no node leads
			t.Fatal(err)
		}
		w.advanceTo(base.Add(35 * time.Second))
		startLeading(t, lb)
		waitFor(t, "b's catch-up", 10*time.Second, func() bool { return strings.Count(got.String(), "*") == 2 })
		w.advanceTo(base.Add(40*time.Second + 100*time.Millisecond))
		jb.Run() // waits for the catch-up to end (OverlapWait)
		if want := "a:10 b:20* b:30* b:40"; got.String() != want {
			t.Errorf("runs %q, want %q\n%s", got, want, logsB)
		}
		var fences []int64
		for _, r := range obsB.results() {
			if r.Outcome == cronlock.OutcomeRan {
				fences = append(fences, r.Fence)
			}
		}
		if len(fences) != 3 || fences[0] <= 0 || fences[0] != fences[1] || fences[1] != fences[2] {
			t.Errorf("b's runs had fences %v, want its leadership's", fences)
		}
	})
	t.Run("paused-leader", func(t *testing.T) {
		w, rdb := newWorld(t)
		name := jobName(t)
		got := &runLog{from: base}
		l, _, logs := newLeader(t, rdb, "a", "e-"+name, w, cronlock.WithMissed(cronlock.MissedRunOnce()))
		j := mustJob(t, l, name, cron.Every(10*time.Second), got.fn())
		startLeading(t, l)
		w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
		j.Run()
		w.advanceTo(base.Add(50*time.Second + 100*time.Millisecond)) // :20 to :40 slept through
		j.Run()
		if want := "a:10 a:40* a:50"; got.String() != want {
			t.Errorf("runs %q, want %q\n%s", got, want, logs)
		}
	})
}
