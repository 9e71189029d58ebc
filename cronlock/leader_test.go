package cronlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// newLeader returns a Locker in leader mode of the election, not started,
// with an Observer; it is closed at cleanup, before its core.Client.
func newLeader(t *testing.T, rdb redis.UniversalClient, node, election string, w *world, opts ...cronlock.Option) (*cronlock.Locker, *tickObs, *logRec) {
	t.Helper()
	obs := &tickObs{}
	opts = append([]cronlock.Option{cronlock.WithLeader(election), cronlock.WithClock(w.clock(0)), cronlock.WithObserver(obs)}, opts...)
	l, _, logs := newLocker(t, rdb, node, opts...)
	t.Cleanup(func() { l.Close(context.Background()) }) // runs before the Client's Close
	return l, obs, logs
}

// startLeading starts l and waits until it leads.
func startLeading(t *testing.T, l *cronlock.Locker) {
	t.Helper()
	l.Start()
	waitFor(t, "leadership", 10*time.Second, l.Leading)
}

// results returns what obs saw end, in order.
func (o *tickObs) results() []cronlock.TickResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ended)
}

// last returns the last result obs saw end.
func (o *tickObs) last(t *testing.T) cronlock.TickResult {
	t.Helper()
	r := o.results()
	if len(r) == 0 {
		t.Fatal("no tick observed")
	}
	return r[len(r)-1]
}

// TestLeaderRunsOnLeaderOnly: of three nodes in leader mode, only the
// leader runs the tick, under the leadership's fence, and records it for
// LastRun; the others skip it as not_leader, and a second run of the same
// tick on the leader is skipped as claimed. No claim or running lease is
// written: the only keys are the leadership's and the LastRun record's.
func TestLeaderRunsOnLeaderOnly(t *testing.T) {
	w, rdb := newWorld(t)
	name, election := jobName(t), "e-"+jobName(t)
	got := newRuns()
	var fence atomic.Int64
	nodes := []string{"a", "b", "c"}
	var lockers []*cronlock.Locker
	var obs []*tickObs
	var logs []*logRec
	var jobs []cron.Job
	for _, n := range nodes {
		l, o, lg := newLeader(t, rdb, n, election, w)
		fn := got.fn(n)
		jobs = append(jobs, mustJob(t, l, name, cron.Every(10*time.Second), func(ctx context.Context) error {
			tick, _ := cronlock.TickFromContext(ctx)
			if !tick.Locked {
				t.Errorf("tick %+v not locked", tick)
			}
			fence.Store(tick.Fence)
			return fn(ctx)
		}))
		lockers, obs, logs = append(lockers, l), append(obs, o), append(logs, lg)
	}
	startLeading(t, lockers[0]) // a campaigns first
	lockers[1].Start()
	lockers[2].Start()

	tick := base.Add(10 * time.Second)
	w.advanceTo(tick)
	for _, j := range jobs {
		j.Run()
	}
	jobs[0].Run() // the same tick again
	if ran := got.snapshot()[tick]; !slices.Equal(ran, []string{"a"}) {
		t.Fatalf("tick ran on %v, want only on a\n%s", ran, logs[0])
	}
	admin := mustNew(core.NewRedis(rdb))
	defer admin.Close()
	info, err := admin.Inspect(context.Background(), "cron:"+election+":leader")
	if err != nil || info.Metadata != "a" || fence.Load() != info.Fence || info.Fence <= 0 {
		t.Errorf("leadership %+v, %v; the job saw fence %d", info, err, fence.Load())
	}
	if r := obs[0].results(); len(r) != 2 || r[0].Outcome != cronlock.OutcomeRan || !r[0].Locked || r[0].Fence != info.Fence ||
		r[1].Outcome != cronlock.OutcomeSkipped || r[1].Skip != cronlock.SkipClaimed {
		t.Errorf("a observed %+v, want ran then skipped as claimed", r)
	}
	for i := 1; i < 3; i++ {
		if r := obs[i].last(t); r.Outcome != cronlock.OutcomeSkipped || r.Skip != cronlock.SkipNotLeader || r.Err != nil {
			t.Errorf("%s observed %+v, want skipped as not_leader", nodes[i], r)
		}
		if skips := logs[i].find("skip"); len(skips) != 1 || skips[0].value("reason") != "not the leader" || skips[0].err != nil {
			t.Errorf("%s's log: %s", nodes[i], logs[i])
		}
		if lockers[i].Leading() {
			t.Errorf("%s leads too", nodes[i])
		}
	}
	run, err := lockers[2].LastRun(context.Background(), name)
	if err != nil || run.Node != "a" || !run.Planned.Equal(tick) || run.Running || run.Fence != info.Fence {
		t.Errorf("LastRun = %+v, %v", run, err)
	}
	for _, k := range w.mr.Keys() {
		if strings.Contains(k, ":running") || strings.Contains(k, ":"+itoa(tick.Unix())) {
			t.Errorf("per-tick lock key %q written in leader mode", k)
		}
	}
}

// TestLeaderNotStarted: a Locker in leader mode that was never started
// runs nothing, and says so as an error.
func TestLeaderNotStarted(t *testing.T) {
	w, rdb := newWorld(t)
	l, obs, logs := newLeader(t, rdb, "a", "e-"+jobName(t), w)
	var ran atomic.Bool
	j := mustJob(t, l, jobName(t), cron.Every(10*time.Second), func(context.Context) error { ran.Store(true); return nil })
	w.advanceTo(base.Add(10 * time.Second))
	j.Run()
	if ran.Load() || l.Leading() {
		t.Fatal("ran (or leads) without Start")
	}
	if r := obs.last(t); r.Outcome != cronlock.OutcomeSkipped || r.Skip != cronlock.SkipNotLeader {
		t.Errorf("observed %+v", r)
	}
	if e := logs.find("skip"); len(e) != 1 || e[0].err == nil || !strings.Contains(e[0].err.Error(), "Start") {
		t.Errorf("log: %s", logs)
	}
}

// TestLeaderLostCancelsJob: while a job runs, another holder takes the
// leadership's key (as when Redis lost it and another node won). The job's
// context is cancelled with a cause matching core.ErrLost, the run is
// reported lost and recorded with the error, and the node runs nothing
// while it does not lead. When the key is free again the node leads
// again, under a higher fence, and runs the next tick.
func TestLeaderLostCancelsJob(t *testing.T) {
	w, rdb := newWorld(t)
	name, election := jobName(t), "e-"+jobName(t)
	l, obs, logs := newLeader(t, rdb, "a", election, w, cronlock.WithLeaseTTL(300*time.Millisecond))
	b := newBlocker(true)
	var calls atomic.Int32
	var fences []int64
	j := mustJob(t, l, name, cron.Every(10*time.Second), func(ctx context.Context) error {
		tick, _ := cronlock.TickFromContext(ctx)
		fences = append(fences, tick.Fence) // runs are sequential here
		if calls.Add(1) == 1 {
			return b.fn(ctx)
		}
		return nil
	})
	startLeading(t, l)

	w.advanceTo(base.Add(10 * time.Second))
	done := make(chan struct{})
	go func() { defer close(done); j.Run() }()
	<-b.started
	key := "latchkey:{cron:" + election + ":leader}"
	w.mr.Set(key, "another-holder's-token") // the next renewal finds it taken
	w.mr.SetTTL(key, time.Hour)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job's context was not cancelled")
	}
	if !errors.Is(b.cause, core.ErrLost) {
		t.Fatalf("cause = %v, want core.ErrLost", b.cause)
	}
	if r := obs.last(t); r.Outcome != cronlock.OutcomeLost || !errors.Is(r.Err, core.ErrLost) || !r.Locked {
		t.Errorf("observed %+v, want lost", r)
	}
	run, err := l.LastRun(context.Background(), name)
	if err != nil || !strings.Contains(run.Error, core.ErrLost.Error()) || run.Running {
		t.Errorf("LastRun = %+v, %v", run, err)
	}
	if len(logs.find("leadership lost")) != 1 {
		t.Errorf("log: %s", logs)
	}

	if l.Leading() {
		t.Fatal("still leading after the loss")
	}
	w.advanceTo(base.Add(20 * time.Second)) // miniredis's clock stays: the other holder's key lives on
	if !w.mr.Exists(key) {
		t.Fatal("the other holder's key expired")
	}
	j.Run()
	if r := obs.last(t); r.Outcome != cronlock.OutcomeSkipped || r.Skip != cronlock.SkipNotLeader {
		t.Errorf("a tick while not leading: %+v", r)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("job called %d times, want 1", n)
	}

	w.mr.Del(key) // the other holder is gone, as a release would: a leads again
	w.mr.Publish(key, "r:")
	waitFor(t, "leadership again", 10*time.Second, l.Leading)
	w.advanceTo(base.Add(30 * time.Second))
	j.Run()
	if r := obs.last(t); r.Outcome != cronlock.OutcomeRan {
		t.Fatalf("a tick after leading again: %+v\n%s", r, logs)
	}
	if len(fences) != 2 || fences[1] <= fences[0] {
		t.Errorf("fences %v, want rising", fences)
	}
}

// TestLeaderCloseHandsOver: Close cancels the job that still runs (cause
// matching ErrClosed and core.ErrLost), waits for it, and resigns: the
// other node leads at once, far sooner than the leadership's TTL (30 s),
// skips the tick the old leader ran (LastRun says it ran) and runs the
// next under a higher fence. Ticks of the closed Locker are skipped as
// closed.
func TestLeaderCloseHandsOver(t *testing.T) {
	w, rdb := newWorld(t)
	name, election := jobName(t), "e-"+jobName(t)
	la, obsA, _ := newLeader(t, rdb, "a", election, w)
	lb, obsB, logsB := newLeader(t, rdb, "b", election, w)
	blk := newBlocker(true)
	ja := mustJob(t, la, name, cron.Every(10*time.Second), blk.fn)
	var fenceB atomic.Int64
	var bRuns atomic.Int32
	jb := mustJob(t, lb, name, cron.Every(10*time.Second), func(ctx context.Context) error {
		tick, _ := cronlock.TickFromContext(ctx)
		fenceB.Store(tick.Fence)
		bRuns.Add(1)
		return nil
	})
	startLeading(t, la)
	lb.Start()

	first := base.Add(10 * time.Second)
	w.advanceTo(first)
	ran := make(chan struct{})
	go func() { defer close(ran); ja.Run() }()
	<-blk.started
	closed := make(chan error)
	go func() { closed <- la.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case <-blk.ended: // Close waited for the job
	default:
		t.Fatal("Close returned while the job still ran")
	}
	<-ran
	if !errors.Is(blk.cause, cronlock.ErrClosed) || !errors.Is(blk.cause, core.ErrLost) {
		t.Errorf("cause = %v, want ErrClosed and core.ErrLost", blk.cause)
	}
	fenceA := obsA.last(t).Fence
	if r := obsA.last(t); r.Outcome != cronlock.OutcomeLost || !errors.Is(r.Err, cronlock.ErrClosed) {
		t.Errorf("a observed %+v", r)
	}
	waitFor(t, "b's leadership", 5*time.Second, lb.Leading) // resigned: no wait for the TTL

	jb.Run() // b's cron fires the tick a ran (its clock is late, say)
	if n := bRuns.Load(); n != 0 {
		t.Fatalf("b ran the tick a ran\n%s", logsB)
	}
	if r := obsB.last(t); r.Outcome != cronlock.OutcomeSkipped || r.Skip != cronlock.SkipClaimed {
		t.Errorf("b observed %+v, want skipped as claimed", r)
	}
	w.advanceTo(first.Add(10 * time.Second))
	ja.Run()
	jb.Run()
	if r := obsA.last(t); r.Outcome != cronlock.OutcomeSkipped || r.Skip != cronlock.SkipClosed || !errors.Is(r.Err, cronlock.ErrClosed) {
		t.Errorf("a after Close observed %+v", r)
	}
	if n := bRuns.Load(); n != 1 || fenceB.Load() <= fenceA {
		t.Errorf("b ran %d times, fence %d after a's %d", n, fenceB.Load(), fenceA)
	}
	if la.Leading() || la.Close(context.Background()) != nil {
		t.Error("a leads, or a second Close failed")
	}
}

// TestLeaderCloseGivesUp: when ctx ends before a job that ignores its
// context returns, Close resigns anyway and says so.
func TestLeaderCloseGivesUp(t *testing.T) {
	w, rdb := newWorld(t)
	name, election := jobName(t), "e-"+jobName(t)
	la, _, _ := newLeader(t, rdb, "a", election, w)
	lb, _, _ := newLeader(t, rdb, "b", election, w)
	blk := newBlocker(false) // ignores its context
	ja := mustJob(t, la, name, cron.Every(10*time.Second), blk.fn)
	startLeading(t, la)
	lb.Start()
	w.advanceTo(base.Add(10 * time.Second))
	ran := make(chan struct{})
	go func() { defer close(ran); ja.Run() }()
	<-blk.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := la.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want context.DeadlineExceeded", err)
	}
	waitFor(t, "b's leadership", 5*time.Second, lb.Leading)
	close(blk.release)
	<-ran
}

// TestLeaderOverlap: on the leader, a tick that comes while the job's
// previous run still runs is skipped (OverlapSkip).
func TestLeaderOverlap(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	l, obs, _ := newLeader(t, rdb, "a", "e-"+name, w)
	blk := newBlocker(false)
	j := mustJob(t, l, name, cron.Every(10*time.Second), blk.fn)
	startLeading(t, l)
	w.advanceTo(base.Add(10 * time.Second))
	ran := make(chan struct{})
	go func() { defer close(ran); j.Run() }()
	<-blk.started
	w.advanceTo(base.Add(20 * time.Second))
	j.Run() // blk would panic on a second start
	close(blk.release)
	<-ran
	r := obs.results()
	if len(r) != 2 || r[0].Outcome != cronlock.OutcomeSkipped || r[0].Skip != cronlock.SkipRunning || r[1].Outcome != cronlock.OutcomeRan {
		t.Errorf("observed %+v, want skipped as running, then ran", r)
	}
}

// TestLeaderPerTickNoops: without WithLeader, Start and Close do nothing
// and the Locker never leads; SkipNotLeader has its name.
func TestLeaderPerTickNoops(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	l := mustNew(cronlock.New(client))
	l.Start()
	if l.Leading() || l.Close(context.Background()) != nil {
		t.Error("a per-tick Locker leads, or its Close failed")
	}
	if s := cronlock.SkipNotLeader.String(); s != "not_leader" {
		t.Errorf("SkipNotLeader.String() = %q", s)
	}
}
