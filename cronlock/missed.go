package cronlock

import (
	"context"
	"strconv"
	"time"
)

// A Missed says what a Locker does with a job's missed ticks (WithMissed):
// ticks planned since the job's last run, on any node, that no node ran —
// every node was down, every process stalled through them, Redis could not
// be reached, or (leader mode) no node led. Make one with MissedSkip,
// MissedRunOnce or MissedRunAll; the zero Missed is MissedSkip.
//
// A tick is missed only if it came after the job's last run as its LastRun
// record says, and was not planned while that run ran (such a tick was
// skipped or waited by WithOverlap: it was not missed). A job with no
// LastRun record — never run, or not in the last 30 days (three intervals
// for a rarer job) — has no missed ticks.
type Missed struct {
	mode   missedMode
	max    int           // most missed ticks run by one look-back
	maxAge time.Duration // 0: no age bound
}

type missedMode uint8

const (
	missedSkip missedMode = iota
	missedOnce
	missedAll
)

// MissedSkip leaves missed ticks alone, as robfig/cron does: the job runs
// again at its next tick. It is the default. The Locker does not look for
// missed ticks, so it costs nothing and reports none.
func MissedSkip() Missed { return Missed{} }

// MissedRunOnce runs the job once for its missed ticks, for the latest of
// them, whatever their number — what a daily report or a cleanup wants
// after an outage: one run, not one per missed day.
func MissedRunOnce() Missed { return Missed{mode: missedOnce, max: 1} }

// MissedRunAll runs the job for each of its missed ticks, oldest first, at
// most max of them — the latest max; older ones stay missed. What a job
// whose every tick covers its own period (an hourly export) wants. max
// must be at least 1 (else WithMissed is ErrInvalidOption).
func MissedRunAll(max int) Missed { return Missed{mode: missedAll, max: max} }

// Within returns m that runs only missed ticks planned at most maxAge
// before the look-back (older ones stay missed): a tick too stale to be
// worth running. 0 (the default) is no bound but the LastRun record's; a
// negative maxAge is ErrInvalidOption in WithMissed. It does not change
// MissedSkip.
func (m Missed) Within(maxAge time.Duration) Missed {
	m.maxAge = maxAge
	return m
}

// String returns "skip", "once", "all(n)", followed by " within d" for a
// max age: "all(24) within 24h0m0s".
func (m Missed) String() string {
	var s string
	switch m.mode {
	case missedSkip:
		return "skip"
	case missedOnce:
		s = "once"
	default:
		s = "all(" + strconv.Itoa(m.max) + ")"
	}
	if m.maxAge != 0 {
		s += " within " + m.maxAge.String()
	}
	return s
}

// catchesUp reports whether m runs missed ticks, and so looks for them.
func (m Missed) catchesUp() bool { return m.mode != missedSkip }

// WithMissed sets what the Locker does with missed ticks (default
// MissedSkip): run them once or each, as catch-up runs.
//
// With MissedRunOnce or MissedRunAll, the Locker looks for missed ticks
//
//   - when the cron starts (AddFunc schedules a one-shot entry for it;
//     with Job, call Locker.CatchUp) — a fleet back from an outage;
//   - at every tick, on the node that runs it, before it runs it — a
//     process that was paused (GC, swap, a laptop's sleep): robfig/cron
//     runs a job once when it wakes, whatever it slept through;
//   - in leader mode, when a node starts to lead, and at its ticks — the
//     ticks of the takeover gap, when no node led.
//
// Each missed tick that the policy runs is claimed on its own, by the key
// of its planned time as an on-time tick would be, so no two nodes catch
// up the same tick, and no node catches up a tick that another ran. It runs
// under the running lease like any run (in leader mode, under the
// leadership), so a tick that comes meanwhile is skipped or waits
// (WithOverlap); catch-up runs go oldest first, before the tick that found
// them, and share the fence of the lease they run under. A catch-up run's
// Tick has CatchUp set and Planned the missed fire time, and so has its
// LastRun record. A look-back costs one read of the LastRun record on the
// node that runs the tick (none when WithSpread's read shows nothing
// missed); at the cron's start, one read per job and node, and the running
// lease only if ticks were missed.
//
// Every look-back that finds missed ticks logs "missed" at Info (count,
// first, last, catch_up: how many it runs, policy) and tells an Observer
// that implements MissedObserver.
func WithMissed(m Missed) Option {
	return optionFunc(func(c *config) {
		switch {
		case m.mode == missedAll && m.max < 1:
			c.fail("MissedRunAll(%d): want at least 1", m.max)
			return
		case m.maxAge < 0:
			c.fail("missed ticks within %v: negative age", m.maxAge)
			return
		}
		c.missed = m
	})
}

// MissedTicks describes the missed ticks of a job that one look-back found
// (WithMissed). Count counts at most maxMissedScan (65 536) ticks.
type MissedTicks struct {
	// Name is the job's name; Node this node's ID.
	Name, Node string
	// First and Last are the planned times of the oldest and the latest
	// missed tick.
	First, Last time.Time
	// Count is how many ticks were missed.
	Count int
	// CatchUp is how many of them the policy runs now — the latest ones —
	// each as a tick of its own (Tick.CatchUp). Count − CatchUp stay
	// missed.
	CatchUp int
	// Policy is the Locker's policy (WithMissed).
	Policy Missed
}

// A MissedObserver is an Observer that is also told of missed ticks.
// WithObserver's Observer gets TicksMissed calls if it implements it;
// package otel's does.
type MissedObserver interface {
	// TicksMissed is called once per look-back that finds missed ticks,
	// before their catch-up runs start. ctx is the context of the tick
	// that looked back (its span, with package otel), or a background
	// context when the look-back was not part of a tick (the cron's
	// start, Locker.CatchUp, a new leader). It must be fast and must not
	// block.
	TicksMissed(ctx context.Context, m MissedTicks)
}
