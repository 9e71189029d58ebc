package httpidem_test

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	"github.com/latchkey/latchkey/httpidem"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestDayStartAndLength(t *testing.T) {
	cases := []struct {
		name  string
		zone  string
		day   string
		start string        // first instant, UTC
		len   time.Duration // until the next day's start
	}{
		{"ordinary", "Europe/Berlin", "2026-06-15", "2026-06-14T22:00:00Z", 24 * time.Hour},
		{"spring forward (23h)", "America/New_York", "2026-03-08", "2026-03-08T05:00:00Z", 23 * time.Hour},
		{"fall back (25h)", "America/New_York", "2026-11-01", "2026-11-01T04:00:00Z", 25 * time.Hour},
		{"no midnight: starts 01:00 -03 (23h)", "America/Santiago", "2026-09-06", "2026-09-06T04:00:00Z", 23 * time.Hour},
		{"day before the missing midnight", "America/Santiago", "2026-09-05", "2026-09-05T04:00:00Z", 24 * time.Hour},
		{"Santiago fall back: repeated 23:00 (25h)", "America/Santiago", "2026-04-04", "2026-04-04T03:00:00Z", 25 * time.Hour},
		{"no midnight, Beirut", "Asia/Beirut", "2026-03-29", "2026-03-28T22:00:00Z", 23 * time.Hour},
		{"UTC+14", "Pacific/Kiritimati", "2026-01-01", "2025-12-31T10:00:00Z", 24 * time.Hour},
		{"UTC-12", "Etc/GMT+12", "2026-01-01", "2026-01-01T12:00:00Z", 24 * time.Hour},
		{"Feb 29", "UTC", "2028-02-29", "2028-02-29T00:00:00Z", 24 * time.Hour},
		{"Dec 31", "Asia/Tokyo", "2026-12-31", "2026-12-30T15:00:00Z", 24 * time.Hour},
		// Midnight twice: the clock goes back from 01:00 (02:00) to 00:00.
		// The day starts at the first midnight; the day before ends there.
		{"repeated midnight, Amman 2014 (25h)", "Asia/Amman", "2014-10-31", "2014-10-30T21:00:00Z", 25 * time.Hour},
		{"day before, Amman 2014", "Asia/Amman", "2014-10-30", "2014-10-29T21:00:00Z", 24 * time.Hour},
		{"repeated midnight, Amman 2020 (25h)", "Asia/Amman", "2020-10-30", "2020-10-29T21:00:00Z", 25 * time.Hour},
		{"day before, Amman 2020", "Asia/Amman", "2020-10-29", "2020-10-28T21:00:00Z", 24 * time.Hour},
		{"repeated midnight, Gaza 2015 (25h)", "Asia/Gaza", "2015-10-23", "2015-10-22T21:00:00Z", 25 * time.Hour},
		{"repeated midnight, Hebron 2020 (25h)", "Asia/Hebron", "2020-10-24", "2020-10-23T21:00:00Z", 25 * time.Hour},
		{"repeated midnight, Vostok 2023 (26h)", "Antarctica/Vostok", "2023-12-18", "2023-12-17T17:00:00Z", 26 * time.Hour},
		{"day before, Vostok 2023", "Antarctica/Vostok", "2023-12-17", "2023-12-16T17:00:00Z", 24 * time.Hour},
		{"repeated midnight, Davis 2009 (26h)", "Antarctica/Davis", "2009-10-18", "2009-10-17T17:00:00Z", 26 * time.Hour},
		{"repeated midnight, Chita 2014 (26h)", "Asia/Chita", "2014-10-26", "2014-10-25T14:00:00Z", 26 * time.Hour},
		{"Berlin spring forward (23h)", "Europe/Berlin", "2026-03-29", "2026-03-28T23:00:00Z", 23 * time.Hour},
		{"Berlin fall back (25h)", "Europe/Berlin", "2026-10-25", "2026-10-24T22:00:00Z", 25 * time.Hour},
		{"Sydney fall back (25h)", "Australia/Sydney", "2026-04-05", "2026-04-04T13:00:00Z", 25 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			loc := mustZone(t, c.zone)
			d, err := httpidem.ParseDay(c.day)
			if err != nil {
				t.Fatal(err)
			}
			start := d.Start(loc)
			if !start.Equal(utc(c.start)) {
				t.Fatalf("Start = %v (%v), want %v", start, start.UTC(), c.start)
			}
			if got := httpidem.DayOf(start, loc); got != d {
				t.Fatalf("DayOf(Start) = %v, want %v", got, d)
			}
			if got := httpidem.DayOf(start.Add(-time.Nanosecond), loc); got != d.AddDays(-1) {
				t.Fatalf("the instant before Start is on %v, want %v", got, d.AddDays(-1))
			}
			if got := d.End(loc).Sub(start); got != c.len {
				t.Fatalf("day length %v, want %v", got, c.len)
			}
		})
	}
}

func TestDayCalendar(t *testing.T) {
	cases := []struct {
		from string
		n    int
		want string
	}{
		{"2028-02-28", 1, "2028-02-29"},
		{"2028-02-29", 1, "2028-03-01"},
		{"2027-02-28", 1, "2027-03-01"},
		{"2026-12-31", 1, "2027-01-01"},
		{"2027-01-01", -1, "2026-12-31"},
		{"2026-01-31", 30, "2026-03-02"},
	}
	for _, c := range cases {
		d, _ := httpidem.ParseDay(c.from)
		if got := d.AddDays(c.n).String(); got != c.want {
			t.Errorf("%s + %d = %s, want %s", c.from, c.n, got, c.want)
		}
	}
	if _, err := httpidem.ParseDay("2026-02-30"); err == nil {
		t.Error("ParseDay accepted 2026-02-30")
	}
	if got := httpidem.DayOf(utc("2026-01-01T05:00:00Z"), nil); got.String() != "2026-01-01" {
		t.Errorf("nil location is not UTC: %v", got)
	}
}
