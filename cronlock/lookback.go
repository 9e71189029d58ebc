package cronlock

import (
	"context"
	"time"

	"github.com/robfig/cron/v3"
)

// maxMissedScan bounds how many missed ticks one look-back counts: an
// "@every 1s" job whose fleet was down for a month has missed millions.
const maxMissedScan = 1 << 16

// startGrace: a look-back outside a tick (the cron's start, CatchUp, a new
// leader) leaves a tick planned less than this long ago to the nodes that
// fire it on time.
const startGrace = time.Second

// A scan is what a look-back found: the missed ticks of a job, and the
// ones the policy runs.
type scan struct {
	count       int       // missed ticks, at most maxMissedScan
	first, last time.Time // the oldest and the latest
	run         []time.Time
}

// lookBack finds the job's ticks missed after last and before upTo
// (exclusive), judged at now: the fire times after last.Planned, but for
// those planned while last ran (from its start to its end: they were
// skipped, or waited, by WithOverlap; a run that never recorded its end
// was cut short, and every tick after it counts). run holds the ones the
// policy runs, oldest first: the latest, at most its max, none older than
// its max age.
func (j *job) lookBack(last Run, upTo, now time.Time) scan {
	var s scan
	pol := j.l.cfg.missed
	if !pol.catchesUp() {
		return s
	}
	after := last.Planned.In(j.loc)
	busyFrom, busyTo := last.Start, last.Start.Add(last.Duration)
	overlapped := func(t time.Time) bool {
		return !last.Running && !t.Before(busyFrom) && !t.After(busyTo)
	}

	// Count them oldest first, stepping over the last run's time.
	for t := j.sched.Next(after); !t.IsZero() && t.Before(upTo) && s.count < maxMissedScan; {
		if overlapped(t) {
			n := j.sched.Next(busyTo.In(j.loc))
			if !n.After(t) {
				break
			}
			t = n
			continue
		}
		if s.count == 0 {
			s.first = t
		}
		s.count++
		n := j.sched.Next(t)
		if !n.After(t) {
			break
		}
		t = n
	}
	if s.count == 0 {
		return s
	}

	// Pick the latest ones, stepping back from upTo.
	var oldest time.Time
	if pol.maxAge > 0 {
		oldest = now.Add(-pol.maxAge)
	}
	for t := prevFire(j.sched, upTo.In(j.loc)); !t.IsZero() && t.After(after); {
		if overlapped(t) {
			t = prevFire(j.sched, busyFrom.In(j.loc))
			continue
		}
		if s.last.IsZero() {
			s.last = t
		}
		if len(s.run) == pol.max || t.Before(oldest) {
			break
		}
		s.run = append(s.run, t)
		t = prevFire(j.sched, t)
	}
	for i, k := 0, len(s.run)-1; i < k; i, k = i+1, k-1 {
		s.run[i], s.run[k] = s.run[k], s.run[i]
	}
	return s
}

// prevFire returns the latest fire time of s before t, or the zero time.
func prevFire(s cron.Schedule, t time.Time) time.Time {
	p, _, err := plan(s, t.Add(-time.Nanosecond))
	if err != nil {
		return time.Time{}
	}
	return p
}

// startUpTo returns the latest tick at now, and the end (exclusive) of
// the ticks a look-back at now, outside a tick, considers: the latest
// tick is included, unless it came less than startGrace ago — that one is
// the nodes' that fire it on time.
func (j *job) startUpTo(now time.Time) (planned, upTo time.Time, err error) {
	planned, _, err = plan(j.sched, now)
	if err != nil {
		return planned, planned, err
	}
	if now.Sub(planned) < startGrace {
		return planned, planned, nil
	}
	return planned, planned.Add(time.Nanosecond), nil
}

// reportMissed logs what a look-back found and tells a MissedObserver.
func (j *job) reportMissed(ctx context.Context, s scan, kv []any) {
	l := j.l
	l.cfg.logger.Info("missed", with(kv, "count", s.count, "first", s.first, "last", s.last,
		"catch_up", len(s.run), "policy", l.cfg.missed.String())...)
	if o, ok := l.cfg.observer.(MissedObserver); ok {
		o.TicksMissed(ctx, MissedTicks{Name: j.name, Node: l.cfg.node, First: s.first, Last: s.last,
			Count: s.count, CatchUp: len(s.run), Policy: l.cfg.missed})
	}
}
