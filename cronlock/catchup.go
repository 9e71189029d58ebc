package cronlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/errjoin"
)

// CatchUp looks now for the missed ticks of every job the Locker made (Job,
// AddFunc) and runs them as WithMissed says, one job after the other, and
// returns when they have run. AddFunc does this for its job when the cron
// starts; with jobs made by Job, call CatchUp once their cron runs.
// Calling it again is harmless: a tick caught up is no longer missed.
//
// ctx bounds the look-backs, and no further catch-up run starts once it
// has ended; a run under way is not cancelled by it. CatchUp returns the
// errors of the look-backs that could not be made (Redis unreachable,
// ctx), joined; a catch-up run's own failure is logged and recorded as a
// tick's is. With MissedSkip it does nothing. In leader mode it does
// nothing unless this node leads: a node that starts to lead does it
// anyway.
func (l *Locker) CatchUp(ctx context.Context) error {
	if !l.cfg.missed.catchesUp() {
		return nil
	}
	var err error
	for _, j := range l.madeJobs() {
		if ctx.Err() != nil {
			return errjoin.Join(err, context.Cause(ctx))
		}
		err = errjoin.Join(err, j.catchUpNow(ctx))
	}
	return err
}

// madeJobs returns the jobs the Locker made, oldest first.
func (l *Locker) madeJobs() []*job {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*job(nil), l.jobs...)
}

// atStart is the schedule of AddFunc's one-shot entry: it fires once, when
// the cron starts (at once if it runs), and never again.
type atStart struct{ fired atomic.Bool }

// Next returns t the first time and the zero time (never) after.
func (s *atStart) Next(t time.Time) time.Time {
	if s.fired.CompareAndSwap(false, true) {
		return t
	}
	return time.Time{}
}

// startJob is the job of AddFunc's one-shot entry: the job's look-back
// when the cron starts.
type startJob struct{ j *job }

// Run looks for the job's missed ticks and runs them; see Locker.CatchUp.
func (s startJob) Run() { _ = s.j.catchUpNow(context.Background()) }

// catchUpNow looks for the job's missed ticks outside a tick — the cron's
// start, CatchUp — and runs the ones the policy says. Under per-tick
// claims it reads the job's record, and only if it finds missed ticks
// takes the running lease, reads again under it and runs them, oldest
// first; if the lease is held, the job is running, and its next tick
// looks again.
func (j *job) catchUpNow(ctx context.Context) error {
	l := j.l
	if !l.cfg.missed.catchesUp() {
		return nil
	}
	now := l.cfg.clock().In(j.loc)
	planned, upTo, err := j.startUpTo(now)
	if err != nil { // no tick has come yet (or the schedule is broken: its ticks say so)
		return nil
	}
	kv := []any{"job", j.name, "planned", planned, "node", l.cfg.node}
	if l.leader != nil {
		return j.leaderCatchUpNow(ctx, upTo, kv)
	}
	rec, ok, err := j.readLast(ctx, kv)
	if err != nil || !ok || j.lookBack(rec.Run, upTo, now).count == 0 {
		return err
	}
	lease, err := l.client.TryLock(ctx, j.runKey, core.WithTTL(l.cfg.leaseTTL), core.WithMetadata(l.cfg.node+" catch-up"))
	switch {
	case errors.Is(err, core.ErrNotAcquired) && ctx.Err() == nil:
		l.cfg.logger.Info("catch-up deferred: the job is running; its next tick looks again", kv...)
		return nil
	case err != nil:
		l.cfg.logger.Error(err, "cannot look for missed ticks: running lease", kv...)
		return err
	}
	h := &hold{lock: lease, release: true}
	defer j.release(ctx, h, kv)
	if rec, ok, err = j.readLast(ctx, kv); err != nil || !ok {
		return err
	}
	s := j.lookBack(rec.Run, upTo, l.cfg.clock().In(j.loc))
	if s.count == 0 {
		return nil
	}
	parent := context.WithoutCancel(ctx)
	j.reportMissed(parent, s, kv)
	j.runMissed(ctx, parent, s.run, &hold{lock: lease}, rec.recent())
	return nil
}

// catchUpBefore runs the missed ticks before the tick planned at planned,
// on the node that runs that tick, under its running lease, before it
// runs it. last is the job's record as spreadWait read it before the
// claim (read false: it did not): when it shows nothing missed, nothing
// was, since the record only moves forward. It returns the latest record
// it knows.
func (j *job) catchUpBefore(ctx context.Context, lease *core.Lock, planned time.Time, last runRecord, read bool, kv []any) (runRecord, bool) {
	l := j.l
	if read && j.lookBack(last.Run, planned, l.cfg.clock().In(j.loc)).count == 0 {
		return last, true
	}
	rec, ok, err := j.readLast(ctx, kv)
	if err != nil || !ok {
		return last, read
	}
	s := j.lookBack(rec.Run, planned, l.cfg.clock().In(j.loc))
	if s.count > 0 {
		j.reportMissed(ctx, s, kv)
		rec.Recent = j.runMissed(ctx, ctx, s.run, &hold{lock: lease}, rec.recent())
	}
	return rec, true
}

// readLast reads the job's record for a look-back; ok is false when there
// is none (no tick since can be missed). A failure is logged.
func (j *job) readLast(ctx context.Context, kv []any) (rec runRecord, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	rec, err = j.l.lastRecord(ctx, j.name)
	switch {
	case errors.Is(err, ErrNoRun):
		return rec, false, nil
	case err != nil:
		if ctx.Err() == nil || context.Cause(ctx) == context.DeadlineExceeded {
			j.l.cfg.logger.Error(err, "cannot look for missed ticks", kv...)
		}
		return rec, false, err
	}
	return rec, true, nil
}

// runMissed runs the missed ticks ts, oldest first, under h (never
// released here), each as a catch-up tick observed under parent. It stops
// when ctx ends, h is lost, or Redis fails. recent is the list of the
// nodes that ran the job last; it returns it as the runs left it.
func (j *job) runMissed(ctx, parent context.Context, ts []time.Time, h *hold, recent []string) []string {
	for _, m := range ts {
		if ctx.Err() != nil || h.ended() != nil {
			j.l.cfg.logger.Info("catch-up stopped", "job", j.name, "planned", m, "node", j.l.cfg.node,
				"reason", "lease lost or context done")
			break
		}
		res, _ := j.catchUpTick(parent, m, h, recent, nil)
		if res.Outcome != OutcomeSkipped {
			recent = withRecent(j.l.cfg.node, recent)
		}
		if res.Skip == SkipError || res.Skip == SkipClosed {
			break
		}
	}
	return recent
}

// catchUpTick runs the missed tick planned at m under h, as a catch-up run:
// observed, claimed — by the key its on-time claim would have, with a
// window that reaches now, so that only one claim of it ever succeeds — and
// recorded. gate, if not nil, is asked first whether the run may begin
// (leader mode), and returns what to call when it ends. It returns the
// outcome and, if the job was run, the run's record.
func (j *job) catchUpTick(parent context.Context, m time.Time, h *hold, recent []string, gate func() (done func(), why SkipReason, err error)) (res TickResult, run Run) {
	l := j.l
	ctx, end := j.observe(parent, m, true)
	res = TickResult{Outcome: OutcomeSkipped}
	defer func() { end(res) }()
	kv := []any{"job", j.name, "planned", m, "node", l.cfg.node, "catch_up", true}
	if gate != nil {
		done, why, err := gate()
		if why != SkipNone {
			res.Skip, res.Err = why, err
			l.cfg.logger.Info("skip", with(kv, "reason", why.String())...)
			return res, run
		}
		defer done()
	}
	var interval time.Duration
	if n := j.sched.Next(m); !n.IsZero() {
		interval = n.Sub(m)
	}
	ttl, _ := l.claimTimes(interval)
	window := l.cfg.clock().Sub(m) + ttl + opTimeout // judged by Redis's clock: leave room for skew
	v, err := j.claim(ctx, j.claimKey(m), ttl, m, window)
	switch {
	case err != nil:
		l.cfg.logger.Error(err, "skip: cannot claim a missed tick", kv...)
		res.Skip, res.Err = skipReason(err), err
		return res, run
	case v == core.ClaimTaken:
		res.Skip = SkipClaimed
		l.cfg.logger.Info("skip", with(kv, "reason", "tick claimed by another run")...)
		return res, run
	case v == core.ClaimLate:
		res.Skip = SkipLate
		l.cfg.logger.Info("skip", with(kv, "reason", "claim reached Redis after the catch-up's window", "window", window)...)
		return res, run
	}
	return j.execute(ctx, runSpec{planned: m, interval: interval, catchUp: true, recent: recent}, h, kv)
}
