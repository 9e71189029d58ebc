package cronlock

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Aligned returns the schedule that every node should give to the cron.
// For "@every d" (a cron.ConstantDelaySchedule, or a pointer to one) it is
// a schedule that fires at the epoch-aligned multiples of d — 00:00:00,
// 00:00:10, 00:00:20 … for d = 10s, in Unix time — instead of d after
// whenever that node's cron started, so that all nodes fire the same tick
// together. Like robfig's, d is at least a second and truncated to whole
// seconds. Any other schedule is returned unchanged (spec schedules are
// already aligned to the wall clock).
//
// AddFunc does this itself. With Job, schedule the job with
// c.Schedule(cronlock.Aligned(s), job).
func Aligned(s cron.Schedule) cron.Schedule {
	switch d := s.(type) {
	case cron.ConstantDelaySchedule:
		return alignedEvery(d.Delay)
	case *cron.ConstantDelaySchedule:
		if d != nil {
			return alignedEvery(d.Delay)
		}
	}
	return s
}

// alignedEvery fires at the Unix-epoch-aligned multiples of a whole number
// of seconds. Its tick index is floor(unix seconds / interval).
type alignedEvery time.Duration

func (a alignedEvery) seconds() int64 {
	s := int64(time.Duration(a) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// Next returns the first aligned time strictly after t.
func (a alignedEvery) Next(t time.Time) time.Time {
	d := a.seconds()
	return time.Unix((floorDiv(t.Unix(), d)+1)*d, 0).In(t.Location())
}

// floorDiv is a/b rounded towards minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// maxLookback bounds the search for a previous fire time: beyond robfig's
// own five-year horizon for a next one.
const maxLookback = 6 * 366 * 24 * time.Hour

// maxSteps bounds the forward walk inside the search window.
const maxSteps = 1 << 16

// plan returns the tick that a run at now serves — the latest fire time of
// s at or before now — and the fire time after it (zero if there is none).
//
// robfig/cron calls a job when its own clock reaches the planned time, so
// at the moment the job reads the clock the planned time is the last fire
// time not after now. For an aligned "@every" this is the interval index
// floor(now/d)·d. For any other schedule, which only offers Next, it is
// found by looking back: Next(now − w) for a window w = 1 s, 2 s, 4 s …
// until a fire time falls in (now − w, now], then walking forward with Next
// to the last one not after now. The result depends only on the schedule
// and the clock reading — not on when the cron started, how long the job
// took or what other nodes did — so every node whose clock reads a time in
// [T, next) plans the same tick T.
func plan(s cron.Schedule, now time.Time) (planned, next time.Time, err error) {
	if a, ok := s.(alignedEvery); ok {
		d := a.seconds()
		p := time.Unix(floorDiv(now.Unix(), d)*d, 0).In(now.Location())
		return p, a.Next(p), nil
	}
	for w := time.Second; w <= 2*maxLookback; w *= 2 {
		t := s.Next(now.Add(-w))
		if t.IsZero() || t.After(now) {
			continue
		}
		for i := 0; i < maxSteps; i++ {
			n := s.Next(t)
			if !n.IsZero() && !n.After(t) {
				return time.Time{}, time.Time{}, fmt.Errorf("%w: Next(%v) = %v does not move forward", ErrInvalidSchedule, t, n)
			}
			if n.IsZero() || n.After(now) {
				return t, n, nil
			}
			t = n
		}
		return time.Time{}, time.Time{}, fmt.Errorf("%w: over %d fire times in %v", ErrInvalidSchedule, maxSteps, w)
	}
	return time.Time{}, time.Time{}, fmt.Errorf("%w: no fire time at or before %v", ErrInvalidSchedule, now)
}
