package cronlock

import (
	"context"
	"strconv"
	"time"
)

// An Observer sees every tick a Locker handles on this node — for tracing
// and metrics; package otel implements one. Its methods are called on the
// tick's goroutine: they must be fast, must not block, and must be safe for
// concurrent use. Install one with WithObserver.
type Observer interface {
	// TickStart is called when a tick begins on this node, before the
	// tick is claimed. t carries Name, Planned, Node and CatchUp (a
	// catch-up run of a missed tick, WithMissed); its Fence and Locked are
	// not known yet (they come in the TickResult). A catch-up run's ctx is
	// the context of the tick that found it missed, if one did. The context
	// it returns is the parent of everything the tick does: the claim, the
	// running lease (so its lock operations are observed under it), the
	// run record, and the job function's context (so spans the job starts
	// nest under the tick). It must not be cancelled by the Observer. end
	// is called exactly once, when the tick is over on this node.
	TickStart(ctx context.Context, t Tick) (context.Context, func(TickResult))
}

// WithObserver installs an Observer that is told how every tick ends on
// this node (default none; nil keeps none).
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) { c.observer = o })
}

// An Outcome is how a tick ended on this node.
type Outcome uint8

// The tick outcomes.
const (
	// OutcomeRan: the job function ran and returned nil.
	OutcomeRan Outcome = iota + 1
	// OutcomeSkipped: the job did not run on this node (see SkipReason).
	OutcomeSkipped
	// OutcomeFailed: the job function returned an error, panicked
	// (ErrPanic) or reached the max hold (ErrMaxHold).
	OutcomeFailed
	// OutcomeLost: the running lease — in leader mode the leadership —
	// was lost while the job ran, or before it could start; the job's
	// context was cancelled with a cause matching core.ErrLost (and
	// ErrClosed when Locker.Close ended the leadership).
	OutcomeLost
)

// String returns "ran", "skipped", "failed", "lost", or "Outcome(n)".
func (o Outcome) String() string {
	switch o {
	case OutcomeRan:
		return "ran"
	case OutcomeSkipped:
		return "skipped"
	case OutcomeFailed:
		return "failed"
	case OutcomeLost:
		return "lost"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// A SkipReason says why a tick was skipped on this node.
type SkipReason uint8

// The skip reasons.
const (
	// SkipNone: the tick was not skipped.
	SkipNone SkipReason = iota
	// SkipClaimed: another run (another node) had claimed the tick; in
	// leader mode (WithLeader), the tick had already run — on a previous
	// leader, by the job's LastRun record, or on this node.
	SkipClaimed
	// SkipRunning: the previous run still held the running lease
	// (OverlapSkip, or OverlapWait until the next fire time).
	SkipRunning
	// SkipClosed: the core.Client was closed, or (leader mode) the
	// Locker was.
	SkipClosed
	// SkipError: claiming the tick or taking the running lease failed —
	// Redis unreachable (and the Locker fails closed) or an invalid lock
	// setting; in leader mode, reading the job's LastRun record at a new
	// leader's first tick of it failed; for a catch-up run (WithMissed),
	// recording its start failed. TickResult.Err says which.
	SkipError
	// SkipLate: the claim reached Redis after the tick's window — the
	// next fire time, by Redis's clock — because the node, its link or
	// Redis stalled. Redis refused it so that a late node cannot run a
	// tick another node already ran; no node may run the tick.
	SkipLate
	// SkipNotLeader: in leader mode (WithLeader), this node did not lead
	// the election when the tick came — another node leads, none does yet
	// (a takeover under way), or Locker.Start was not called (logged as
	// an error). Err is nil.
	SkipNotLeader
)

// String returns "", "claimed", "running", "closed", "error", "late",
// "not_leader", or "SkipReason(n)".
func (r SkipReason) String() string {
	switch r {
	case SkipNone:
		return ""
	case SkipClaimed:
		return "claimed"
	case SkipRunning:
		return "running"
	case SkipClosed:
		return "closed"
	case SkipError:
		return "error"
	case SkipLate:
		return "late"
	case SkipNotLeader:
		return "not_leader"
	}
	return "SkipReason(" + strconv.Itoa(int(r)) + ")"
}

// TickResult is how a tick ended on this node.
type TickResult struct {
	// Outcome is ran, skipped, failed or lost.
	Outcome Outcome
	// Skip says why, for OutcomeSkipped; SkipNone otherwise.
	Skip SkipReason
	// Err is nil for OutcomeRan, for a skip by contention (SkipClaimed,
	// SkipRunning) and for SkipLate. It is the job's error for
	// OutcomeFailed, an error matching core.ErrLost for OutcomeLost, and
	// the locking error for SkipError and SkipClosed.
	Err error
	// Fence is the running lease's fence (in leader mode, the
	// leadership's); 0 when the job did not run under the lock.
	Fence int64
	// Locked is true when the job ran under the claim and running lease
	// (in leader mode, the leadership), false when it was skipped or ran
	// without the lock (WithFailOpen).
	Locked bool
	// Duration is how long the job function ran; 0 when it did not run.
	Duration time.Duration
}

// observe starts observing the tick planned at planned (a catch-up run's
// if catchUp), under parent. Without an Observer it returns parent and a
// no-op.
func (j *job) observe(parent context.Context, planned time.Time, catchUp bool) (context.Context, func(TickResult)) {
	o := j.l.cfg.observer
	if o == nil {
		return parent, func(TickResult) {}
	}
	return o.TickStart(parent, Tick{Name: j.name, Planned: planned, Node: j.l.cfg.node, CatchUp: catchUp})
}
