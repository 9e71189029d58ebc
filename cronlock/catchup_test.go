package cronlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// TestMissedOverlappedNotMissed: with real time, a run of the one-second
// job takes 4.6 s; the ticks that come meanwhile are skipped by
// OverlapSkip, and the claims of the first ones expire. The next tick
// looks back: those ticks were planned while the job ran, so they were not
// missed, and none is caught up.
func TestMissedOverlappedNotMissed(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	stop := mrclock.Run(mr)
	t.Cleanup(stop)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	name := jobName(t)
	got := &runLog{}
	var calls sync.Map
	slow := func(ctx context.Context) error {
		if _, loaded := calls.LoadOrStore("first", true); !loaded {
			time.Sleep(4600 * time.Millisecond)
		}
		return got.fn()(ctx)
	}
	la, _, _ := newLocker(t, rdb, "a", cronlock.WithMissed(cronlock.MissedRunAll(10)))
	lb, _, logsB := newLocker(t, rdb, "b", cronlock.WithMissed(cronlock.MissedRunAll(10)))
	ja := mustJob(t, la, name, cron.Every(time.Second), slow)
	jb := mustJob(t, lb, name, cron.Every(time.Second), slow)

	start := time.Now().Truncate(time.Second).Add(time.Second)
	got.from = start
	at := func(s int) { time.Sleep(time.Until(start.Add(time.Duration(s)*time.Second + 20*time.Millisecond))) }
	at(0)
	done := make(chan struct{})
	go func() { defer close(done); ja.Run() }()
	for s := 1; s <= 4; s++ {
		at(s)
		jb.Run() // skipped: a still runs
	}
	<-done
	at(5)
	jb.Run()
	if want := "a:0 b:5"; got.String() != want {
		t.Errorf("runs %q, want %q\n%s", got, want, logsB)
	}
	if len(logsB.find("missed")) != 0 {
		t.Errorf("overlapped ticks taken for missed:\n%s", logsB)
	}
}

// TestMissedWithoutLeaseStops: catch-up runs hold the running lease; when
// it is lost during the first of them, the node stops catching up,
// leaving the other missed ticks unclaimed, and another node's look-back
// runs them.
func TestMissedWithoutLeaseStops(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	got := &runLog{from: base}
	all := cronlock.WithMissed(cronlock.MissedRunAll(10))
	la, _, logsA := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)), all, cronlock.WithLeaseTTL(300*time.Millisecond))
	lb, _, _ := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)), all)
	record := got.fn()
	ja := mustJob(t, la, name, cron.Every(10*time.Second), func(ctx context.Context) error {
		if tick, _ := cronlock.TickFromContext(ctx); tick.CatchUp {
			w.mr.Del("latchkey:{cron:" + name + ":running}") // Redis lost the lease
			<-ctx.Done()
		}
		return record(ctx)
	})
	mustJob(t, lb, name, cron.Every(10*time.Second), record)
	w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
	ja.Run()
	w.advanceTo(base.Add(45 * time.Second))
	if err := la.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "a:10 a:20*"; got.String() != want {
		t.Fatalf("runs %q, want %q\n%s", got, want, logsA)
	}
	if err := lb.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "a:10 a:20* b:30* b:40*"; got.String() != want {
		t.Errorf("runs %q, want %q", got, want)
	}
}

// failRecords is a go-redis hook that fails the writes of run records
// while on.
type failRecords struct{ on *atomic.Bool }

func (h failRecords) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failRecords) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if h.on.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 {
			if key, _ := args[3].(string); strings.HasSuffix(key, ":last}:rec") {
				err := errors.New("injected: record write failed")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h failRecords) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestMissedUnrecordedNotRun: a catch-up run whose start cannot be
// recorded does not run — without the record a later look-back could take
// the tick for missed again once its claim expired — and the tick is
// reported skipped with the error. (An on-time tick runs anyway: its
// claim's window keeps it from running twice.)
func TestMissedUnrecordedNotRun(t *testing.T) {
	w, rdb := newWorld(t)
	var failing atomic.Bool
	rdb.AddHook(failRecords{&failing})
	name := jobName(t)
	got := &runLog{from: base}
	obs := &missObs{}
	l, _, logs := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)), cronlock.WithMissed(cronlock.MissedRunAll(10)),
		cronlock.WithObserver(obs))
	j := mustJob(t, l, name, cron.Every(10*time.Second), got.fn())
	w.advanceTo(base.Add(10*time.Second + 100*time.Millisecond))
	j.Run()
	failing.Store(true)
	w.advanceTo(base.Add(30*time.Second + 100*time.Millisecond))
	j.Run()
	if want := "a:10 a:30"; got.String() != want {
		t.Errorf("runs %q, want %q\n%s", got, want, logs)
	}
	if c := obs.catchUps(); len(c) != 1 || c[0].res.Outcome != cronlock.OutcomeSkipped || c[0].res.Skip != cronlock.SkipError || c[0].res.Err == nil {
		t.Errorf("catch-ups observed %+v, want :20 skipped with the error", c)
	}
}
