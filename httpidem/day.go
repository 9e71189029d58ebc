package httpidem

import (
	"fmt"
	"time"
)

// A Day is a civil date: the calendar day of an instant in a location. The
// zero Day is invalid as an argument.
type Day struct {
	Year  int        // the year, e.g. 2026
	Month time.Month // January = 1
	Day   int        // day of the month, from 1
}

// DayOf returns the day t falls on in loc (nil: UTC — never time.Local).
func DayOf(t time.Time, loc *time.Location) Day {
	if loc == nil {
		loc = time.UTC
	}
	y, m, d := t.In(loc).Date()
	return Day{y, m, d}
}

// ParseDay parses "2006-01-02".
func ParseDay(s string) (Day, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Day{}, fmt.Errorf("%w: day %q: %w", ErrInvalidArgument, s, err)
	}
	return DayOf(t, time.UTC), nil
}

// String returns the day as "2006-01-02".
func (d Day) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day)
}

// IsZero reports whether d is the zero Day.
func (d Day) IsZero() bool { return d == Day{} }

// AddDays returns the day n days after d (before, for negative n), by the
// calendar: month and year ends and leap days included.
func (d Day) AddDays(n int) Day {
	return DayOf(time.Date(d.Year, d.Month, d.Day+n, 12, 0, 0, 0, time.UTC), time.UTC)
}

// Before reports whether d comes before e.
func (d Day) Before(e Day) bool {
	if d.Year != e.Year {
		return d.Year < e.Year
	}
	if d.Month != e.Month {
		return d.Month < e.Month
	}
	return d.Day < e.Day
}

// Start returns the first instant of d in loc (nil: UTC). That is local
// midnight, computed with time.Date, except where midnight does not exist
// or exists twice:
//
//   - a DST change at 00:00, as in America/Santiago, where the clock jumps
//     from 23:59:59 to 01:00 and time.Date answers an instant of the day
//     before: then Start is the moment of the change, the first instant
//     that is d;
//   - a change back from 01:00 to 00:00, as in Asia/Amman on 2014-10-31
//     or Antarctica/Vostok (02:00 to 00:00) on 2023-12-18, where time.Date
//     may answer the second midnight: then Start is the first one.
func (d Day) Start(loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	t := time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, loc)
	// A skipped midnight: t is still on the day before. The first instant
	// of d is where the zone period containing t ends. Two steps at most
	// cover any sane zone; the loop bound only guards against a broken one.
	for i := 0; i < 4 && DayOf(t, loc).Before(d); i++ {
		_, end := t.ZoneBounds()
		if end.IsZero() || !end.After(t) {
			break
		}
		t = end
	}
	// A repeated midnight: the instant before t's zone period began is on
	// d too, so d began in an earlier period — at its local midnight, or at
	// its start if midnight was skipped into it (then look further back).
	for i := 0; i < 4; i++ {
		start, _ := t.ZoneBounds()
		if start.IsZero() { // the zone's first period: nothing before it
			break
		}
		prev := start.Add(-time.Nanosecond)
		if DayOf(prev, loc) != d {
			break
		}
		_, offset := prev.Zone()
		pstart, _ := prev.ZoneBounds()
		m := time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC).Add(-time.Duration(offset) * time.Second)
		if !pstart.IsZero() && m.Before(pstart) {
			m = pstart
		}
		t = m.In(loc)
	}
	return t
}

// End returns the first instant of the day after d in loc: when d is over.
func (d Day) End(loc *time.Location) time.Time {
	return d.AddDays(1).Start(loc)
}
