package cronlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A term is one leadership of this node. Its fields but lock are guarded
// by leader.mu.
type term struct {
	lock *core.Lock
	// floors holds, per job name, the planned time of the latest tick run
	// (in this term, or by a predecessor as LastRun says): later ticks
	// only.
	floors map[string]time.Time
	// lasts holds, per job name, its latest run that this term knows of
	// (LastRun's, or its own), for look-backs (WithMissed); none for a job
	// with no record.
	lasts map[string]Run
	// lookedBack, with WithMissed, is closed when the term's first
	// look-back (the ticks of the takeover gap) has finished: a tick that
	// comes meanwhile waits for it rather than find its job "running".
	lookedBack chan struct{}
	active     int  // runs of this term begun and not finished
	ended      bool // no longer this node's term (lost or resigned)
	released   bool // Release called, or to be called, by one of us
}

// end marks t as no longer this node's term, with leader.mu held, and
// reports whether the caller must release its lock now (no run of it is
// left to do so).
func (t *term) end() (release bool) {
	t.ended = true
	if t.active > 0 || t.released {
		return false
	}
	t.released = true
	return true
}

// current returns this node's term, or why a tick cannot run here.
func (ld *leader) current() (*term, SkipReason, error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	switch {
	case ld.closed:
		return nil, SkipClosed, ld.resigned
	case ld.clientClosed:
		return nil, SkipClosed, fmt.Errorf("cronlock: campaign for %q: %w", ld.election, core.ErrClosed)
	case !ld.started:
		return nil, SkipNotLeader, errNotStarted
	case ld.term == nil || ld.term.lock.Err() != nil:
		return nil, SkipNotLeader, nil
	}
	return ld.term, SkipNone, nil
}

// knows reports whether term t knows the latest tick of job that ran.
func (ld *leader) knows(t *term, job string) bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	_, ok := t.floors[job]
	return ok
}

// learn records what term t knows of job from its LastRun record (ok
// false: none): its ticks up to last.Planned have run.
func (ld *leader) learn(t *term, job string, last Run, ok bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if old, seen := t.floors[job]; !seen || last.Planned.After(old) {
		t.floors[job] = last.Planned
	}
	if ok {
		t.lasts[job] = last
	}
}

// ran records run, just ended, as job's latest run in term t.
func (ld *leader) ran(t *term, job string, run Run) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if old, ok := t.lasts[job]; !ok || !run.Planned.Before(old.Planned) {
		t.lasts[job] = run
	}
}

// lastOf returns job's latest run that term t knows of.
func (ld *leader) lastOf(t *term, job string) (Run, bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	r, ok := t.lasts[job]
	return r, ok
}

// begin starts a run of job's tick planned at planned in term t, unless
// t is no longer this node's term (lost, or the Locker closed) or the
// tick already ran. The caller calls finish after a run begun.
func (ld *leader) begin(t *term, job string, planned time.Time) SkipReason {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	switch {
	case ld.closed:
		return SkipClosed
	case ld.term != t || t.lock.Err() != nil:
		return SkipNotLeader
	case !planned.After(t.floors[job]):
		return SkipClaimed
	}
	t.floors[job] = planned
	t.active++
	ld.active++
	return SkipNone
}

// finish ends a run of term t begun with begin. The last run of a term
// that was lost releases its lock, as a run under per-tick claims releases
// its lost running lease when it returns: the key expires by itself, and
// the Client forgets the lease.
func (ld *leader) finish(t *term) {
	ld.mu.Lock()
	t.active--
	release := t.ended && t.active == 0 && !t.released
	if release {
		t.released = true
	}
	ld.active--
	if ld.active == 0 && ld.idle != nil {
		close(ld.idle)
		ld.idle = nil
	}
	ld.mu.Unlock()
	if release {
		_ = t.lock.Release(context.Background())
	}
}

// enter takes job's slot on this node — one run at a time — at once, or
// waiting at most wait; it returns a function that gives it back, or nil
// if the previous run kept it.
func (ld *leader) enter(job string, wait time.Duration) func() {
	ld.mu.Lock()
	slot, ok := ld.slots[job]
	if !ok {
		slot = make(chan struct{}, 1)
		ld.slots[job] = slot
	}
	ld.mu.Unlock()
	leave := func() { <-slot }
	select {
	case slot <- struct{}{}:
		return leave
	default:
	}
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case slot <- struct{}{}:
		return leave
	case <-timer.C:
	case <-ld.closing:
	}
	return nil
}

// leaderTick runs the tick planned at planned in leader mode: here if this
// node leads, with no lock work.
func (j *job) leaderTick(ctx context.Context, planned, next time.Time, interval time.Duration, kv []any) TickResult {
	l, ld := j.l, j.l.leader
	log := l.cfg.logger
	kv = with(kv, "election", ld.election)
	skip := func(why SkipReason, err error, reason string, more ...any) TickResult {
		log.Info("skip", with(kv, append([]any{"reason", reason}, more...)...)...)
		return TickResult{Outcome: OutcomeSkipped, Skip: why, Err: err}
	}

	t, why, err := ld.current()
	switch {
	case why == SkipClosed:
		return skip(why, err, "locker closed")
	case errors.Is(err, errNotStarted):
		log.Error(err, "skip", with(kv, "reason", "leader mode not started")...)
		return TickResult{Outcome: OutcomeSkipped, Skip: SkipNotLeader}
	case why != SkipNone:
		return skip(why, nil, "not the leader")
	}

	if t.lookedBack != nil {
		select {
		case <-t.lookedBack:
		case <-ctx.Done():
			return skip(SkipNotLeader, context.Cause(ctx), "cancelled while the term looked back")
		case <-ld.closing:
			return skip(SkipClosed, ld.resigned, "locker closed")
		}
	}
	var wait time.Duration
	if l.cfg.overlap == OverlapWait {
		wait = 24 * time.Hour
		if !next.IsZero() {
			wait = next.Sub(l.cfg.clock())
		}
	}
	leave := ld.enter(j.name, wait)
	if leave == nil {
		return skip(SkipRunning, nil, "previous run still running", "overlap", l.cfg.overlap.String())
	}
	defer leave()

	// A new term's first tick of the job learns what its predecessor ran.
	if err := j.leaderLearn(ctx, t, kv); err != nil {
		return TickResult{Outcome: OutcomeSkipped, Skip: skipReason(err), Err: err}
	}
	if l.cfg.missed.catchesUp() {
		j.leaderCatchUp(ctx, t, planned, kv)
	}
	switch ld.begin(t, j.name, planned) {
	case SkipNone:
	case SkipClosed:
		return skip(SkipClosed, ld.resigned, "locker closed")
	case SkipClaimed:
		return skip(SkipClaimed, nil, "tick already run")
	default:
		return skip(SkipNotLeader, nil, "not the leader")
	}
	defer ld.finish(t)
	res, run := j.execute(ctx, runSpec{planned: planned, interval: interval}, &hold{lock: t.lock, stop: ld.closing, stopCause: ld.resigned}, kv)
	ld.ran(t, j.name, run)
	return res
}

// leaderLearn reads, at term t's first look at the job, its LastRun
// record: the ticks the predecessor ran are not run again, and a
// look-back starts from it. It returns an error, logged, only when Redis
// cannot say.
func (j *job) leaderLearn(ctx context.Context, t *term, kv []any) error {
	l, ld := j.l, j.l.leader
	if ld.knows(t, j.name) {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	last, err := l.LastRun(rctx, j.name)
	cancel()
	switch {
	case errors.Is(err, ErrNoRun):
		ld.learn(t, j.name, Run{}, false)
	case errors.Is(err, core.ErrUnavailable), errors.Is(err, core.ErrClosed):
		l.cfg.logger.Error(err, "skip: cannot read the job's last run (first tick of a new leader)", kv...)
		return err
	case err != nil: // a record no run can have written: do not let it stop the job
		l.cfg.logger.Error(err, "last run unreadable: running the tick without it", kv...)
		ld.learn(t, j.name, Run{}, false)
	default:
		ld.learn(t, j.name, last, true)
	}
	return nil
}

// leaderCatchUp runs, in term t, the job's ticks missed before upTo
// (WithMissed), oldest first, each begun like a tick of the term and
// claimed on Redis like any catch-up run. The caller holds the job's slot.
func (j *job) leaderCatchUp(ctx context.Context, t *term, upTo time.Time, kv []any) {
	l, ld := j.l, j.l.leader
	last, ok := ld.lastOf(t, j.name)
	if !ok {
		return
	}
	s := j.lookBack(last, upTo, l.cfg.clock().In(j.loc))
	if s.count == 0 {
		return
	}
	j.reportMissed(ctx, s, kv)
	h := &hold{lock: t.lock, stop: ld.closing, stopCause: ld.resigned}
	for _, m := range s.run {
		gate := func() (func(), SkipReason, error) {
			switch why := ld.begin(t, j.name, m); why {
			case SkipNone:
				return func() { ld.finish(t) }, SkipNone, nil
			case SkipClosed:
				return nil, why, ld.resigned
			default:
				return nil, why, nil
			}
		}
		res, run := j.catchUpTick(ctx, m, h, nil, gate)
		if !run.Start.IsZero() {
			ld.ran(t, j.name, run)
		}
		switch res.Skip {
		case SkipError, SkipClosed, SkipNotLeader:
			return
		}
	}
}

// leaderCatchUpNow is catchUpNow in leader mode: if this node leads, and
// no run of the job is under way here (it would have looked back itself),
// it looks back to upTo and runs the missed ticks.
func (j *job) leaderCatchUpNow(ctx context.Context, upTo time.Time, kv []any) error {
	ld := j.l.leader
	t, why, _ := ld.current()
	if why != SkipNone {
		return nil // the leader looks back when it starts to lead
	}
	leave := ld.enter(j.name, 0)
	if leave == nil {
		return nil
	}
	defer leave()
	kv = with(kv, "election", ld.election)
	if err := j.leaderLearn(ctx, t, kv); err != nil {
		return err
	}
	j.leaderCatchUp(context.WithoutCancel(ctx), t, upTo, kv)
	return nil
}
