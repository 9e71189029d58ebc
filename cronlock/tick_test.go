package cronlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// blocker is a job function that runs until released, telling when it
// started and what its context said when it ended.
type blocker struct {
	started  chan struct{}
	release  chan struct{}
	ended    chan struct{}
	cause    error
	waitCtx  bool // return when ctx is done instead of on release
	runCount atomic.Int32
}

func newBlocker(waitCtx bool) *blocker {
	return &blocker{started: make(chan struct{}), release: make(chan struct{}), ended: make(chan struct{}), waitCtx: waitCtx}
}

func (b *blocker) fn(ctx context.Context) error {
	b.runCount.Add(1)
	close(b.started)
	defer close(b.ended)
	if b.waitCtx {
		select {
		case <-ctx.Done():
			b.cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("context was never cancelled")
		}
	}
	<-b.release
	return nil
}

func mustJob(t *testing.T, l *cronlock.Locker, name string, s cron.Schedule, fn func(context.Context) error) cron.Job {
	t.Helper()
	j, err := l.Job(name, s, fn)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestOverlapSkip: the next tick, claimed by another node while the
// previous run still holds the running lease, is skipped and logged.
func TestOverlapSkip(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	la, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
	lb, _, logsB := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)))
	slow := newBlocker(false)
	var bRan atomic.Bool
	ja := mustJob(t, la, name, cron.Every(10*time.Second), slow.fn)
	jb := mustJob(t, lb, name, cron.Every(10*time.Second), func(context.Context) error { bRan.Store(true); return nil })

	w.advanceTo(base.Add(10 * time.Second))
	go ja.Run()
	<-slow.started
	w.advanceTo(base.Add(20 * time.Second))
	jb.Run() // returns at once: skipped
	close(slow.release)
	<-slow.ended
	if bRan.Load() {
		t.Fatal("b ran while a still ran the previous tick")
	}
	skips := logsB.find("skip")
	if len(skips) != 1 || skips[0].value("reason") != "previous run still running" {
		t.Fatalf("b's log: %s", logsB)
	}
}

// TestOverlapWait: with OverlapWait the next tick waits for the previous
// run to end, then runs.
func TestOverlapWait(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	la, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
	lb, _, logsB := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)), cronlock.WithOverlap(cronlock.OverlapWait))
	slow := newBlocker(false)
	var aEnded, bStartedAfter atomic.Bool
	ja := mustJob(t, la, name, cron.Every(10*time.Second), slow.fn)
	jb := mustJob(t, lb, name, cron.Every(10*time.Second), func(context.Context) error {
		bStartedAfter.Store(aEnded.Load())
		return nil
	})

	w.advanceTo(base.Add(10 * time.Second))
	go ja.Run()
	<-slow.started
	w.advanceTo(base.Add(20 * time.Second))
	bDone := make(chan struct{})
	go func() { defer close(bDone); jb.Run() }()
	select {
	case <-bDone:
		t.Fatalf("b returned while a still ran:\n%s", logsB)
	case <-time.After(300 * time.Millisecond): // b waits
	}
	aEnded.Store(true)
	close(slow.release)
	select {
	case <-bDone:
	case <-time.After(5 * time.Second):
		t.Fatal("b still waiting 5s after a ended")
	}
	if !bStartedAfter.Load() {
		t.Fatalf("b did not run after a ended:\n%s", logsB)
	}
	run, err := lb.LastRun(context.Background(), name)
	if err != nil || run.Node != "b" || !run.Planned.Equal(base.Add(20*time.Second)) {
		t.Fatalf("LastRun = %+v, %v", run, err)
	}
}

// TestOverlapWaitEndsAtNextFire: a waiting tick gives up when its job's
// next fire time comes, and logs the skip.
func TestOverlapWaitEndsAtNextFire(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	la, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
	lb, _, logsB := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)), cronlock.WithOverlap(cronlock.OverlapWait))
	slow := newBlocker(false)
	var bRan atomic.Bool
	ja := mustJob(t, la, name, cron.Every(time.Second), slow.fn)
	jb := mustJob(t, lb, name, cron.Every(time.Second), func(context.Context) error { bRan.Store(true); return nil })

	w.advanceTo(base.Add(time.Second))
	go ja.Run()
	<-slow.started
	w.advanceTo(base.Add(2*time.Second + 800*time.Millisecond)) // 200 ms before the next fire
	jb.Run()
	close(slow.release)
	<-slow.ended
	if bRan.Load() {
		t.Fatal("b ran while a still ran")
	}
	skips := logsB.find("skip")
	if len(skips) != 1 || skips[0].value("overlap") != "wait" {
		t.Fatalf("b's log: %s", logsB)
	}
}

// TestLeaseLostCancelsJob: when the running lease is lost, the job's
// context is cancelled with a cause matching core.ErrLost, and the run is
// recorded and logged as failed.
func TestLeaseLostCancelsJob(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	l, _, logs := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)), cronlock.WithLeaseTTL(300*time.Millisecond))
	b := newBlocker(true)
	j := mustJob(t, l, name, cron.Every(10*time.Second), b.fn)
	w.advanceTo(base.Add(10 * time.Second))
	done := make(chan struct{})
	go func() { defer close(done); j.Run() }()
	<-b.started
	w.mr.Del("latchkey:{cron:" + name + ":running}") // Redis lost the key
	<-done
	if !errors.Is(b.cause, core.ErrLost) {
		t.Fatalf("cause = %v, want core.ErrLost", b.cause)
	}
	run, err := l.LastRun(context.Background(), name)
	if err != nil || !strings.Contains(run.Error, core.ErrLost.Error()) || run.Running {
		t.Fatalf("LastRun = %+v, %v", run, err)
	}
	if len(logs.find("job failed")) != 1 {
		t.Fatalf("log: %s", logs)
	}
}

// TestMaxHoldCancelsJob: the job's context ends at the max hold, with
// cause ErrMaxHold, which the record names.
func TestMaxHoldCancelsJob(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	l, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)), cronlock.WithMaxHold(50*time.Millisecond))
	b := newBlocker(true)
	j := mustJob(t, l, name, cron.Every(10*time.Second), b.fn)
	w.advanceTo(base.Add(10 * time.Second))
	j.Run()
	if !errors.Is(b.cause, cronlock.ErrMaxHold) {
		t.Fatalf("cause = %v, want ErrMaxHold", b.cause)
	}
	run, err := l.LastRun(context.Background(), name)
	if err != nil || !strings.Contains(run.Error, cronlock.ErrMaxHold.Error()) {
		t.Fatalf("LastRun = %+v, %v", run, err)
	}
}

// unreachable returns a Redis client for a port where nothing listens.
func unreachable(t *testing.T) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestRedisUnreachable: fail closed (default) skips the tick and logs the
// error; fail open runs the job without the lock and logs it.
func TestRedisUnreachable(t *testing.T) {
	tests := []struct {
		name    string
		open    bool
		wantRun bool
		wantLog string
	}{
		{"fail-closed", false, false, "tick skipped (fail closed)"},
		{"fail-open", true, true, "running without the lock (fail open)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _, logs := newLocker(t, unreachable(t), "a", cronlock.WithFailOpen(tt.open))
			var ran atomic.Bool
			var tick cronlock.Tick
			j := mustJob(t, l, jobName(t), cron.Every(time.Second), func(ctx context.Context) error {
				tick, _ = cronlock.TickFromContext(ctx)
				ran.Store(true)
				return nil
			})
			j.Run()
			if ran.Load() != tt.wantRun {
				t.Fatalf("ran = %v, want %v\n%s", ran.Load(), tt.wantRun, logs)
			}
			if tt.wantRun && (tick.Locked || tick.Fence != 0) {
				t.Errorf("tick = %+v, want unlocked", tick)
			}
			entries := logs.find(tt.wantLog)
			if len(entries) != 1 || entries[0].err == nil {
				t.Fatalf("log: %s", logs)
			}
		})
	}
}

// TestErrorsAndPanicsRecorded: a job's error and a job's panic are logged
// through the cron.Logger (the panic with its stack) and recorded for
// LastRun, readable from another node.
func TestErrorsAndPanicsRecorded(t *testing.T) {
	tests := []struct {
		name      string
		fn        func(context.Context) error
		wantErr   string
		wantLog   string
		wantStack bool
	}{
		{"error", func(context.Context) error { return errors.New("ledger offline") }, "ledger offline", "job failed", false},
		{"panic", func(context.Context) error { panic("nil map") }, "job panicked: nil map", "job panicked", true},
		{"ok", func(context.Context) error { return nil }, "", "ran", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, rdb := newWorld(t)
			name := jobName(t)
			l, _, logs := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
			other, _, _ := newLocker(t, rdb, "b")
			j := mustJob(t, l, name, cron.Every(10*time.Second), tt.fn)
			w.advanceTo(base.Add(10*time.Second + 5*time.Millisecond))
			j.Run() // a panic escaping Run would crash the test binary

			entries := logs.find(tt.wantLog)
			if len(entries) != 1 {
				t.Fatalf("log: %s", logs)
			}
			if tt.wantErr != "" && (entries[0].err == nil || !strings.Contains(entries[0].err.Error(), tt.wantErr)) {
				t.Errorf("logged error %v, want %q", entries[0].err, tt.wantErr)
			}
			if stack, _ := entries[0].value("stack").(string); tt.wantStack != strings.Contains(stack, "goroutine") {
				t.Errorf("stack logged = %q", stack)
			}
			run, err := other.LastRun(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if run.Error != "" != (tt.wantErr != "") || !strings.Contains(run.Error, tt.wantErr) {
				t.Errorf("LastRun.Error = %q, want %q", run.Error, tt.wantErr)
			}
			want := cronlock.Run{Name: name, Node: "a", Planned: base.Add(10 * time.Second), Start: base.Add(10*time.Second + 5*time.Millisecond)}
			if run.Name != want.Name || run.Node != want.Node || !run.Planned.Equal(want.Planned) ||
				!run.Start.Equal(want.Start) || run.Running || run.Duration <= 0 || run.Fence <= 0 {
				t.Errorf("LastRun = %+v, want %+v with a duration and a fence", run, want)
			}
		})
	}
}

// TestLastRunNone: LastRun of a job that never ran is ErrNoRun.
func TestLastRunNone(t *testing.T) {
	_, rdb := newWorld(t)
	l, _, _ := newLocker(t, rdb, "a")
	if _, err := l.LastRun(context.Background(), jobName(t)); !errors.Is(err, cronlock.ErrNoRun) {
		t.Fatalf("err = %v, want ErrNoRun", err)
	}
}

// TestLastRunWhileRunning: the record says Running while the job runs.
func TestLastRunWhileRunning(t *testing.T) {
	w, rdb := newWorld(t)
	name := jobName(t)
	l, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
	b := newBlocker(false)
	j := mustJob(t, l, name, cron.Every(10*time.Second), b.fn)
	w.advanceTo(base.Add(10 * time.Second))
	go j.Run()
	<-b.started
	run, err := l.LastRun(context.Background(), name)
	close(b.release)
	<-b.ended
	if err != nil || !run.Running || run.Node != "a" {
		t.Fatalf("LastRun = %+v, %v", run, err)
	}
	waitFor(t, "the end record", 5*time.Second, func() bool {
		run, err := l.LastRun(context.Background(), name)
		return err == nil && !run.Running
	})
}
