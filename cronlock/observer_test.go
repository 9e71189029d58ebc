package cronlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/robfig/cron/v3"
)

// tickObs is a cronlock.Observer that keeps what it saw and marks the
// context it returns.
type tickObs struct {
	mu      sync.Mutex
	started []cronlock.Tick
	ended   []cronlock.TickResult
}

type obsMark struct{}

func (o *tickObs) TickStart(ctx context.Context, t cronlock.Tick) (context.Context, func(cronlock.TickResult)) {
	o.mu.Lock()
	o.started = append(o.started, t)
	o.mu.Unlock()
	return context.WithValue(ctx, obsMark{}, t.Node), func(r cronlock.TickResult) {
		o.mu.Lock()
		o.ended = append(o.ended, r)
		o.mu.Unlock()
	}
}

// only returns the single start and end seen, failing otherwise.
func (o *tickObs) only(t *testing.T) (cronlock.Tick, cronlock.TickResult) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.started) != 1 || len(o.ended) != 1 {
		t.Fatalf("observed %d starts and %d ends, want 1 each: %+v %+v", len(o.started), len(o.ended), o.started, o.ended)
	}
	return o.started[0], o.ended[0]
}

// TestObserver: every way a tick ends is reported once, with the tick's
// name, planned time and node, and the observer's context reaches the job.
func TestObserver(t *testing.T) {
	tests := []struct {
		name     string
		fn       func(ctx context.Context) error
		before   func(w *worldT) // runs before the tick
		opts     []cronlock.Option
		want     cronlock.Outcome
		wantSkip cronlock.SkipReason
		wantErr  error // matched with errors.Is; nil: Err must be nil
		locked   bool
	}{
		{name: "ran", fn: okFn, want: cronlock.OutcomeRan, locked: true},
		{name: "failed", fn: func(context.Context) error { return errBoom }, want: cronlock.OutcomeFailed, wantErr: errBoom, locked: true},
		{name: "panicked", fn: func(context.Context) error { panic("boom") }, want: cronlock.OutcomeFailed, wantErr: cronlock.ErrPanic, locked: true},
		{name: "max-hold", fn: waitCtx, opts: []cronlock.Option{cronlock.WithMaxHold(20 * time.Millisecond)}, want: cronlock.OutcomeFailed, wantErr: cronlock.ErrMaxHold, locked: true},
		{name: "lost", fn: func(ctx context.Context) error {
			lostKey(ctx)
			return waitCtx(ctx)
		}, opts: []cronlock.Option{cronlock.WithLeaseTTL(300 * time.Millisecond)}, want: cronlock.OutcomeLost, wantErr: core.ErrLost, locked: true},
		{name: "claimed", fn: okFn, before: func(w *worldT) { w.other.Run() }, want: cronlock.OutcomeSkipped, wantSkip: cronlock.SkipClaimed},
		{name: "closed", fn: okFn, before: func(w *worldT) { w.client.Close() }, want: cronlock.OutcomeSkipped, wantSkip: cronlock.SkipClosed, wantErr: core.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, rdb := newWorld(t)
			name := jobName(t)
			obs := &tickObs{}
			opts := append([]cronlock.Option{cronlock.WithClock(w.clock(0)), cronlock.WithObserver(obs)}, tt.opts...)
			l, client, _ := newLocker(t, rdb, "a", opts...)
			lb, _, _ := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)))
			var sawMark bool
			j := mustJob(t, l, name, cron.Every(10*time.Second), func(ctx context.Context) error {
				sawMark = ctx.Value(obsMark{}) == "a"
				return tt.fn(context.WithValue(ctx, delKey{}, func() { w.mr.Del("latchkey:{cron:" + name + ":running}") }))
			})
			other := mustJob(t, lb, name, cron.Every(10*time.Second), okFn)
			w.advanceTo(base.Add(10 * time.Second))
			if tt.before != nil {
				tt.before(&worldT{client: client, other: other})
			}
			j.Run()

			tick, res := obs.only(t)
			if tick.Name != name || !tick.Planned.Equal(base.Add(10*time.Second)) || tick.Node != "a" {
				t.Errorf("TickStart got %+v", tick)
			}
			if res.Outcome != tt.want || res.Skip != tt.wantSkip || res.Locked != tt.locked {
				t.Errorf("result %+v (%v/%q), want %v/%q locked=%v", res, res.Outcome, res.Skip, tt.want, tt.wantSkip, tt.locked)
			}
			if (tt.wantErr == nil) != (res.Err == nil) || (tt.wantErr != nil && !errors.Is(res.Err, tt.wantErr)) {
				t.Errorf("Err = %v, want %v", res.Err, tt.wantErr)
			}
			ran := tt.want != cronlock.OutcomeSkipped
			if ran != sawMark || ran != (res.Duration > 0) || tt.locked != (res.Fence > 0) {
				t.Errorf("ran=%v: job saw the observer's context %v, duration %v, fence %d", ran, sawMark, res.Duration, res.Fence)
			}
		})
	}
}

// TestObserverRunningAndUnreachable: a tick skipped because the previous
// run still runs, and ticks on an unreachable Redis (fail closed: skipped
// with the error; fail open: ran without the lock).
func TestObserverRunningAndUnreachable(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		w, rdb := newWorld(t)
		name := jobName(t)
		la, _, _ := newLocker(t, rdb, "a", cronlock.WithClock(w.clock(0)))
		obs := &tickObs{}
		lb, _, _ := newLocker(t, rdb, "b", cronlock.WithClock(w.clock(0)), cronlock.WithObserver(obs))
		slow := newBlocker(false)
		ja := mustJob(t, la, name, cron.Every(10*time.Second), slow.fn)
		jb := mustJob(t, lb, name, cron.Every(10*time.Second), okFn)
		w.advanceTo(base.Add(10 * time.Second))
		go ja.Run()
		<-slow.started
		w.advanceTo(base.Add(20 * time.Second))
		jb.Run()
		close(slow.release)
		<-slow.ended
		if _, res := obs.only(t); res.Outcome != cronlock.OutcomeSkipped || res.Skip != cronlock.SkipRunning || res.Err != nil {
			t.Errorf("result %+v", res)
		}
	})
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "fail-closed", true: "fail-open"}[open], func(t *testing.T) {
			obs := &tickObs{}
			l, _, _ := newLocker(t, unreachable(t), "a", cronlock.WithFailOpen(open), cronlock.WithObserver(obs))
			mustJob(t, l, jobName(t), cron.Every(time.Second), okFn).Run()
			_, res := obs.only(t)
			want := cronlock.TickResult{Outcome: cronlock.OutcomeSkipped, Skip: cronlock.SkipError}
			if open {
				want = cronlock.TickResult{Outcome: cronlock.OutcomeRan}
			}
			if res.Outcome != want.Outcome || res.Skip != want.Skip || res.Locked || res.Fence != 0 || (res.Err != nil) == open {
				t.Errorf("result %+v, want %+v", res, want)
			}
		})
	}
}

func TestOutcomeStrings(t *testing.T) {
	got := []string{
		cronlock.OutcomeRan.String(), cronlock.OutcomeSkipped.String(), cronlock.OutcomeFailed.String(),
		cronlock.OutcomeLost.String(), cronlock.Outcome(9).String(),
		cronlock.SkipNone.String(), cronlock.SkipClaimed.String(), cronlock.SkipRunning.String(),
		cronlock.SkipClosed.String(), cronlock.SkipError.String(), cronlock.SkipReason(9).String(),
	}
	want := []string{"ran", "skipped", "failed", "lost", "Outcome(9)", "", "claimed", "running", "closed", "error", "SkipReason(9)"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("String() = %q, want %q", got[i], want[i])
		}
	}
}

// worldT is what a table entry's before hook may touch.
type worldT struct {
	client *core.Client
	other  cron.Job // the same job on node b
}

var errBoom = errors.New("boom")

func okFn(context.Context) error { return nil }

// waitCtx returns the cause once ctx ends.
func waitCtx(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(10 * time.Second):
		return errors.New("context was never cancelled")
	}
}

type delKey struct{}

// lostKey deletes the running lease from Redis, as a Redis that lost it.
func lostKey(ctx context.Context) { ctx.Value(delKey{}).(func())() }
