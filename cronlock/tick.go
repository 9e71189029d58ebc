package cronlock

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/errjoin"
)

// A Tick tells a job function which tick it serves.
type Tick struct {
	// Name is the job's name.
	Name string
	// Planned is the tick's fire time from the schedule — the same on
	// every node, whatever its clock or its start time. Use it, not
	// time.Now, to name what the run produces ("the report of 03:00").
	Planned time.Time
	// Node is this node's ID (WithNodeID).
	Node string
	// Fence is the running lease's fencing token; it strictly increases from
	// run to run of the job across all nodes — but catch-up runs (CatchUp)
	// share the fence of the lease they run under: that of the tick whose
	// look-back found them, which its own run has too, or the one lease a
	// look-back at the cron's start takes for all it runs. Pass it with
	// writes the job makes so that storage can reject a run that lost its
	// lease. 0 when Locked is false. In leader mode (WithLeader) it is the
	// leadership's fence: the same for every run of one leader's term, and
	// higher for every later term, so storage that rejects a fence lower
	// than the last it saw turns a deposed leader away.
	Fence int64
	// Locked is false only for a run without claim or lease because Redis
	// could not be reached and the Locker fails open (WithFailOpen).
	Locked bool
	// CatchUp is true for a catch-up run (WithMissed): Planned passed
	// while no node ran the job, and this run serves it late — after an
	// outage, a paused process or a leader's takeover. It is false for a
	// tick run in its own window.
	CatchUp bool
}

type tickKey struct{}

// TickFromContext returns the Tick of a job function's context; ok is
// false for any other context.
func TickFromContext(ctx context.Context) (t Tick, ok bool) {
	t, ok = ctx.Value(tickKey{}).(Tick)
	return t, ok
}

// runSpec is what execute runs: one tick of the job.
type runSpec struct {
	planned  time.Time
	interval time.Duration // to the next fire time; 0 for a last tick
	catchUp  bool          // a missed tick (WithMissed)
	recent   []string      // the nodes that ran the job last, latest first
}

// tick runs the tick planned at planned; next is the fire time after it.
func (j *job) tick(planned, next time.Time) {
	l := j.l
	ctx, end := j.observe(context.Background(), planned, false)
	res := TickResult{Outcome: OutcomeSkipped}
	defer func() { end(res) }()
	kv := []any{"job", j.name, "planned", planned, "node", l.cfg.node}
	var interval time.Duration
	if !next.IsZero() {
		interval = next.Sub(planned)
	}
	if l.leader != nil {
		res = j.leaderTick(ctx, planned, next, interval, kv)
		return
	}
	claimTTL, window := l.claimTimes(interval)

	last, read := j.spreadWait(ctx, planned, interval)
	locked := true
	v, err := j.claim(ctx, j.claimKey(planned), claimTTL, planned, window)
	switch {
	case err != nil:
		if !j.degrade(err, "claim", kv) {
			res.Skip, res.Err = skipReason(err), err
			return
		}
		locked = false
	case v == core.ClaimTaken:
		res.Skip = SkipClaimed
		l.cfg.logger.Info("skip", with(kv, "reason", "tick claimed by another run")...)
		return
	case v == core.ClaimLate:
		res.Skip = SkipLate
		l.cfg.logger.Info("skip", with(kv, "reason", "claim reached Redis after the tick's window (next fire time)", "window", window)...)
		return
	}
	var lease *core.Lock
	if locked {
		var ok bool
		lease, ok, err = j.acquireRunning(ctx, planned, next)
		switch {
		case err != nil:
			if !j.degrade(err, "running lease", kv) {
				res.Skip, res.Err = skipReason(err), err
				return
			}
		case !ok:
			res.Skip = SkipRunning
			l.cfg.logger.Info("skip", with(kv, "reason", "previous run still running", "overlap", l.cfg.overlap.String())...)
			return
		}
	}
	var h *hold
	if lease != nil {
		h = &hold{lock: lease, release: true}
		if l.cfg.missed.catchesUp() {
			last, read = j.catchUpBefore(ctx, lease, planned, last, read, kv)
		}
	}
	var recent []string
	if read {
		recent = last.recent()
	}
	res, _ = j.execute(ctx, runSpec{planned: planned, interval: interval, recent: recent}, h, kv)
}

// claimTimes returns the TTL of a tick's claim and its window — the time
// after the planned fire time until which Redis accepts the claim — for a
// tick interval before the next (0 for a last tick).
func (l *Locker) claimTimes(interval time.Duration) (ttl, window time.Duration) {
	ttl = interval + l.minHold(interval)
	if ttl < time.Second {
		ttl = time.Second
	}
	window = interval // a claim arriving after the next fire time is late
	if window <= 0 {
		window = ttl // a last tick
	}
	return ttl, window
}

// skipReason names a locking failure that skips a tick.
func skipReason(err error) SkipReason {
	if errors.Is(err, core.ErrClosed) {
		return SkipClosed
	}
	return SkipError
}

// minHold is the claim's lifetime past the next fire time.
func (l *Locker) minHold(interval time.Duration) time.Duration {
	switch {
	case l.cfg.minHoldSet:
		return l.cfg.minHold
	case interval > 0:
		return interval
	}
	return 24 * time.Hour // a last tick: keep its claim a day
}

// claim takes the tick: one set-if-absent script carrying this node's ID,
// never released, judged by Redis's clock. It answers core.ClaimTaken when
// another run has the tick, and core.ClaimLate — storing nothing — when it
// reaches Redis after planned + window, however long it was delayed on the
// way (a stalled link, a stalled Redis). A claim in time lives ttl, counted
// by Redis, and at least until planned + window, so every claim of the tick
// that is not late finds it: one claim per tick succeeds, whatever the
// delays. A claim is not a lock: it needs no fence and no renewal, and
// survives the node's shutdown.
func (j *job) claim(ctx context.Context, key string, ttl time.Duration, planned time.Time, window time.Duration) (core.ClaimVerdict, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	v, err := j.l.store.ClaimWithin(ctx, key, j.l.cfg.node, ttl, planned, window)
	if err != nil {
		return 0, fmt.Errorf("cronlock: claim tick: %w", err)
	}
	return v, nil
}

// acquireRunning takes the running lease: at once (OverlapSkip) or waiting
// until the next fire time (OverlapWait). ok is false when the previous
// run still holds it.
func (j *job) acquireRunning(ctx context.Context, planned, next time.Time) (h *core.Lock, ok bool, err error) {
	l := j.l
	opts := []core.LockOption{
		core.WithTTL(l.cfg.leaseTTL),
		core.WithMetadata(l.cfg.node + " " + planned.UTC().Format(time.RFC3339Nano)),
	}
	var wait time.Duration
	if l.cfg.overlap == OverlapWait {
		wait = 24 * time.Hour
		if !next.IsZero() {
			wait = next.Sub(l.cfg.clock())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, max(wait, 0)+opTimeout)
	defer cancel()
	if wait > 0 {
		h, err = l.client.Lock(ctx, j.runKey, append(opts, core.WithWaitTimeout(wait))...)
	} else {
		h, err = l.client.TryLock(ctx, j.runKey, opts...)
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, core.ErrNotAcquired) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return h, true, nil
}

// degrade decides what a failure to lock does to the tick: true runs the
// job without the lock (fail open), false skips the tick.
func (j *job) degrade(err error, step string, kv []any) bool {
	log := j.l.cfg.logger
	kv = with(kv, "step", step)
	switch {
	case errors.Is(err, core.ErrClosed):
		log.Info("skip", with(kv, "reason", "core client closed")...)
		return false
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidTTL),
		errors.Is(err, core.ErrInvalidOption), errors.Is(err, core.ErrNilClient):
		log.Error(err, "skip: cannot lock", kv...)
		return false
	case j.l.cfg.failOpen:
		log.Error(err, "redis unreachable: running without the lock (fail open)", kv...)
		return true
	}
	log.Error(err, "redis unreachable: tick skipped (fail closed)", kv...)
	return false
}

// A hold is what a run holds while its job runs: the running lease
// (per-tick claims), or the leadership (WithLeader).
type hold struct {
	lock      *core.Lock      // its loss ends the run (cause lock.Err())
	stop      <-chan struct{} // closing it ends the run too; nil: never
	stopCause error           // the cause when stop closed
	release   bool            // release lock when the run ends
}

// ended returns why h no longer holds — an error matching core.ErrLost —
// or nil while it holds.
func (h *hold) ended() error {
	if err := h.lock.Err(); err != nil {
		return err
	}
	select {
	case <-h.stop:
		return h.stopCause
	default:
		return nil
	}
}

// execute calls the job function under h (nil: without the lock) for the
// tick s, records the run, logs its outcome, releases what h says and
// returns the outcome and the run's final record. The function is not
// called when h ended before it could be, nor for a catch-up tick whose
// start could not be recorded: without the record, a later look-back
// could take the tick for missed once its claim expired, and run it again.
// tickCtx is the tick's context, the parent of the job's.
func (j *job) execute(tickCtx context.Context, s runSpec, h *hold, kv []any) (TickResult, Run) {
	l := j.l
	t := Tick{Name: j.name, Planned: s.planned, Node: l.cfg.node, CatchUp: s.catchUp}
	if h != nil {
		t.Fence, t.Locked = h.lock.Fence(), true
	}
	recent := withRecent(l.cfg.node, s.recent)
	run := Run{Name: j.name, Node: l.cfg.node, Planned: s.planned, Start: l.cfg.clock(), Running: true, Fence: t.Fence, CatchUp: s.catchUp}
	if err := j.record(tickCtx, run, recent, s.interval); err != nil && s.catchUp {
		l.cfg.logger.Error(err, "skip: cannot record the start of a catch-up run", kv...)
		j.release(tickCtx, h, kv)
		return TickResult{Outcome: OutcomeSkipped, Skip: skipReason(err), Err: err}, run
	}

	ctx, cancel := context.WithCancelCause(tickCtx)
	defer cancel(nil)
	if l.cfg.maxHold > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, l.cfg.maxHold, fmt.Errorf("%w (%v)", ErrMaxHold, l.cfg.maxHold))
		defer stop()
	}
	done := make(chan struct{})
	var watcher sync.WaitGroup
	if h != nil {
		watcher.Go(func() {
			select {
			case <-h.lock.Lost():
				cancel(h.lock.Err())
			case <-h.stop:
				cancel(h.stopCause)
			case <-done:
			}
		})
	}
	ctx = context.WithValue(ctx, tickKey{}, t)

	var stack []byte
	var err error
	began := time.Now()
	if h == nil || h.ended() == nil { // never start a job whose hold is gone
		stack, err = j.call(ctx)
	}
	run.Duration = time.Since(began)
	close(done)
	watcher.Wait()

	res := TickResult{Outcome: OutcomeRan, Fence: t.Fence, Locked: t.Locked, Duration: run.Duration}
	if h != nil {
		if lost := h.ended(); lost != nil {
			res.Outcome = OutcomeLost
			if !errors.Is(err, core.ErrLost) {
				err = errjoin.Join(err, lost)
			}
		}
	}
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrMaxHold) && !errors.Is(err, ErrMaxHold) {
		err = errjoin.Join(err, cause)
	}
	run.Running = false
	if err != nil {
		run.Error = err.Error()
	}
	_ = j.record(tickCtx, run, recent, s.interval) // before the release: the next run's record comes after
	j.release(tickCtx, h, kv)
	switch {
	case stack != nil:
		l.cfg.logger.Error(err, "job panicked", with(kv, "stack", string(stack))...)
	case err != nil:
		l.cfg.logger.Error(err, "job failed", with(kv, "duration", run.Duration)...)
	default:
		l.cfg.logger.Info("ran", with(kv, "duration", run.Duration, "fence", t.Fence)...)
	}
	if err != nil {
		res.Err = err
		if res.Outcome == OutcomeRan {
			res.Outcome = OutcomeFailed
		}
	}
	return res, run
}

// release releases the running lease of h if h says so.
func (j *job) release(ctx context.Context, h *hold, kv []any) {
	if h == nil || !h.release {
		return
	}
	if rel := h.lock.Release(ctx); rel != nil && h.lock.Err() == nil {
		j.l.cfg.logger.Error(rel, "cannot release running lease", kv...)
	}
}

// call runs the job function, turning a panic into an error and a stack.
func (j *job) call(ctx context.Context) (stack []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			stack = debug.Stack()
			if e, ok := r.(error); ok {
				err = fmt.Errorf("%w: %w", ErrPanic, e)
			} else {
				err = fmt.Errorf("%w: %v", ErrPanic, r)
			}
		}
	}()
	return nil, j.fn(ctx)
}

// with returns a new slice of kv followed by more.
func with(kv []any, more ...any) []any {
	out := make([]any, 0, len(kv)+len(more))
	return append(append(out, kv...), more...)
}
