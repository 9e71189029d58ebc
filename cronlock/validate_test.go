package cronlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/robfig/cron/v3"
)

func noop(context.Context) error { return nil }

// TestInvalidNames: bad names are refused by AddFunc, Job and LastRun.
func TestInvalidNames(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	l := mustNew(cronlock.New(client))
	c := cron.New()
	for _, name := range []string{
		"",
		strings.Repeat("x", cronlock.MaxNameLen+1),
		"daily\nreport",
		"nul\x00",
		"tab\tname",
		"del\x7f",
		"c1\u0085control",
		"bad\xffutf8",
	} {
		if _, err := l.AddFunc(c, "@hourly", name, noop); !errors.Is(err, cronlock.ErrInvalidName) {
			t.Errorf("AddFunc(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := l.Job(name, cron.Every(time.Minute), noop); !errors.Is(err, cronlock.ErrInvalidName) {
			t.Errorf("Job(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := l.LastRun(context.Background(), name); !errors.Is(err, cronlock.ErrInvalidName) {
			t.Errorf("LastRun(%q) = %v, want ErrInvalidName", name, err)
		}
	}
	if n := len(c.Entries()); n != 0 {
		t.Errorf("%d entries scheduled despite errors", n)
	}
	for _, name := range []string{"report:daily", "日報", "with space", strings.Repeat("x", cronlock.MaxNameLen)} {
		if _, err := l.Job(name, cron.Every(time.Minute), noop); err != nil {
			t.Errorf("Job(%q) = %v", name, err)
		}
	}
}

// nonAdvancing is a broken schedule whose Next does not move forward.
type nonAdvancing struct{}

func (nonAdvancing) Next(t time.Time) time.Time { return t.Truncate(time.Hour) }

// TestInvalidOptions: New refuses a nil client and invalid options.
func TestInvalidOptions(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	tests := []struct {
		name   string
		err    error
		target error
	}{
		{"nil-client", errOf(cronlock.New(nil)), cronlock.ErrNilClient},
		{"negative-min-hold", errOf(cronlock.New(client, cronlock.WithMinHold(-time.Second))), cronlock.ErrInvalidOption},
		{"negative-max-hold", errOf(cronlock.New(client, cronlock.WithMaxHold(-time.Second))), cronlock.ErrInvalidOption},
		{"zero-lease-ttl", errOf(cronlock.New(client, cronlock.WithLeaseTTL(0))), cronlock.ErrInvalidOption},
		{"bad-node-id", errOf(cronlock.New(client, cronlock.WithNodeID("a\nb"))), cronlock.ErrInvalidOption},
		{"unknown-overlap", errOf(cronlock.New(client, cronlock.WithOverlap(cronlock.Overlap(7)))), cronlock.ErrInvalidOption},
		{"empty-election", errOf(cronlock.New(client, cronlock.WithLeader(""))), cronlock.ErrInvalidOption},
		{"bad-election", errOf(cronlock.New(client, cronlock.WithLeader("a\nb"))), cronlock.ErrInvalidOption},
		{"leader-fail-open", errOf(cronlock.New(client, cronlock.WithLeader("e"), cronlock.WithFailOpen(true))), cronlock.ErrInvalidOption},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.target) {
			t.Errorf("%s: New error %v, want %v", tt.name, tt.err, tt.target)
		}
	}
}

// TestInvalidJobs: a nil func, cron or schedule, and specs that cannot be
// planned, are errors from AddFunc and Job.
func TestInvalidJobs(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	l := mustNew(cronlock.New(client))
	addFunc := []struct {
		name   string
		cron   *cron.Cron
		spec   string
		fn     func(context.Context) error
		target error
	}{
		{"nil-func", cron.New(), "@hourly", nil, cronlock.ErrInvalidOption},
		{"nil-cron", nil, "@hourly", noop, cronlock.ErrInvalidOption},
		{"bad-spec", cron.New(), "every day", noop, cronlock.ErrInvalidSchedule},
		{"seconds-spec-on-standard-parser", cron.New(), "*/5 * * * * *", noop, cronlock.ErrInvalidSchedule},
		{"never-fires", cron.New(), "0 0 30 2 *", noop, cronlock.ErrInvalidSchedule},
	}
	for _, tt := range addFunc {
		t.Run("AddFunc/"+tt.name, func(t *testing.T) {
			if _, err := l.AddFunc(tt.cron, tt.spec, "job", tt.fn); !errors.Is(err, tt.target) {
				t.Errorf("AddFunc = %v, want %v", err, tt.target)
			}
		})
	}
	job := []struct {
		name   string
		sched  cron.Schedule
		fn     func(context.Context) error
		target error
	}{
		{"nil-func", cron.Every(time.Minute), nil, cronlock.ErrInvalidOption},
		{"nil-schedule", nil, noop, cronlock.ErrInvalidSchedule},
		{"nil-spec-schedule", (*cron.SpecSchedule)(nil), noop, cronlock.ErrInvalidSchedule},
		{"nil-every-schedule", (*cron.ConstantDelaySchedule)(nil), noop, cronlock.ErrInvalidSchedule},
		{"nil-user-schedule", (*userSchedule)(nil), noop, cronlock.ErrInvalidSchedule},
	}
	for _, tt := range job {
		t.Run("Job/"+tt.name, func(t *testing.T) {
			if _, err := l.Job("job", tt.sched, tt.fn); !errors.Is(err, tt.target) {
				t.Errorf("Job = %v, want %v", err, tt.target)
			}
		})
	}
}

// userSchedule is a cron.Schedule of the user's own type, which reads its
// receiver: a nil one panics if it is ever asked for a time.
type userSchedule struct{ every time.Duration }

func (s *userSchedule) Next(t time.Time) time.Time { return t.Add(s.every) }

// TestPlanBrokenSchedule: a schedule whose Next does not advance is an
// error at the tick, logged, and the job does not run.
func TestPlanBrokenSchedule(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	logs := &logRec{}
	l := mustNew(cronlock.New(client, cronlock.WithLogger(logs)))
	j, err := l.Job("broken", nonAdvancing{}, func(context.Context) error {
		t.Error("ran")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	j.Run()
	entries := logs.find("cannot plan tick")
	if len(entries) != 1 || !errors.Is(entries[0].err, cronlock.ErrInvalidSchedule) {
		t.Fatalf("log: %s", logs)
	}
}

// A six-field spec without WithSeconds (or five with it) says what to do.
func TestScheduleFieldsHint(t *testing.T) {
	for _, tc := range []struct {
		spec string
		opts []cronlock.Option
		want string
	}{
		{"*/5 * * * * *", nil, "use cronlock.WithSeconds()"},
		{"*/5 * * * *", []cronlock.Option{cronlock.WithSeconds()}, "expects 6"},
	} {
		locks := mustNew(core.NewMemory())
		l := mustNew(cronlock.New(locks, tc.opts...))
		_, err := l.AddFunc(cron.New(), tc.spec, "hint", noop)
		if !errors.Is(err, cronlock.ErrInvalidSchedule) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddFunc(%q): %v, want ErrInvalidSchedule saying %q", tc.spec, err, tc.want)
		}
		locks.Close()
	}
}

// errOf returns a constructor's error.
func errOf[T any](_ T, err error) error { return err }
