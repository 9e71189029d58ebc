package cronlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/robfig/cron/v3"
)

// TestLastRuns: LastRuns lists the last run of every job on the backend —
// those other Lockers ran too — once each, and no tick claim.
func TestLastRuns(t *testing.T) {
	w, rdb := newWorld(t)
	a, _, _ := newLocker(t, rdb, "node-a", cronlock.WithClock(w.clock(0)))
	b, _, _ := newLocker(t, rdb, "node-b", cronlock.WithClock(w.clock(0)))
	run := func(l *cronlock.Locker, name string, fail bool) {
		t.Helper()
		job, err := l.Job(name, cron.Every(time.Minute), func(context.Context) error {
			if fail {
				return errors.New("disk full")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		job.Run()
	}
	run(a, "report", false)
	run(b, "export/s3", true)
	run(b, "rollup:last", false) // a name that ends like the record key
	got := map[string]cronlock.Run{}
	for r, err := range a.LastRuns(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[r.Name]; dup {
			t.Errorf("%s listed twice", r.Name)
		}
		got[r.Name] = r
	}
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"export/s3", "report", "rollup:last"}; !slices.Equal(names, want) {
		t.Fatalf("LastRuns listed %q, want %q", names, want)
	}
	if r := got["export/s3"]; r.Node != "node-b" || r.Error != "disk full" || !r.Planned.Equal(base) {
		t.Errorf("export/s3: %+v", r)
	}
}

// TestLastRunsUnavailable: a backend failure is yielded, matching
// core.ErrUnavailable, and ends the listing.
func TestLastRunsUnavailable(t *testing.T) {
	w, rdb := newWorld(t)
	l, _, _ := newLocker(t, rdb, "node-a", cronlock.WithClock(w.clock(0)))
	w.mr.Close()
	n := 0
	for _, err := range l.LastRuns(context.Background()) {
		n++
		if !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("LastRuns on a closed server: %v", err)
		}
	}
	if n != 1 {
		t.Errorf("%d results, want one error", n)
	}
}
