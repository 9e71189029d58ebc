package cronlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	_ "time/tzdata" // CRON_TZ=Asia/Tokyo on machines without a zoneinfo
)

// never is a schedule without fire times.
type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }

// TestPlan: the planned time is the last fire time at or before the clock
// reading, the next one follows it, for aligned "@every" and spec
// schedules of every period.
func TestPlan(t *testing.T) {
	secs := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	parse := func(spec string) cron.Schedule {
		s, err := secs.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// 2031-05-06T07:00:00Z is Unix 1935817200 = 21509080·90: a multiple of 90 s.
	tests := []struct {
		name    string
		sched   cron.Schedule
		now     string
		planned string
		next    string
	}{
		{"every10s-mid", cronlock.Aligned(cron.Every(10 * time.Second)), "2031-05-06T07:00:15.3Z", "2031-05-06T07:00:10Z", "2031-05-06T07:00:20Z"},
		{"every10s-exact", cronlock.Aligned(cron.Every(10 * time.Second)), "2031-05-06T07:00:20Z", "2031-05-06T07:00:20Z", "2031-05-06T07:00:30Z"},
		{"every90s-index", cronlock.Aligned(cron.Every(90 * time.Second)), "2031-05-06T07:02:59Z", "2031-05-06T07:01:30Z", "2031-05-06T07:03:00Z"},
		{"every-subsecond-rounds-up", cronlock.Aligned(cron.ConstantDelaySchedule{Delay: 300 * time.Millisecond}), "2031-05-06T07:00:01.7Z", "2031-05-06T07:00:01Z", "2031-05-06T07:00:02Z"},
		{"every-pointer", cronlock.Aligned(&cron.ConstantDelaySchedule{Delay: time.Minute}), "2031-05-06T07:00:59Z", "2031-05-06T07:00:00Z", "2031-05-06T07:01:00Z"},
		{"seconds-spec-just-before", parse("*/15 * * * * *"), "2031-05-06T07:00:14.999Z", "2031-05-06T07:00:00Z", "2031-05-06T07:00:15Z"},
		{"seconds-spec-exact", parse("*/15 * * * * *"), "2031-05-06T07:00:15Z", "2031-05-06T07:00:15Z", "2031-05-06T07:00:30Z"},
		{"daily-lookback", parse("0 0 3 * * *"), "2031-05-06T02:59:59Z", "2031-05-05T03:00:00Z", "2031-05-06T03:00:00Z"},
		{"daily-in-zone", parse("CRON_TZ=Asia/Tokyo 0 0 3 * * *"), "2031-05-06T07:00:00Z", "2031-05-05T18:00:00Z", "2031-05-06T18:00:00Z"},
		{"monthly", parse("0 0 0 1 * *"), "2031-05-20T12:00:00Z", "2031-05-01T00:00:00Z", "2031-06-01T00:00:00Z"},
		{"yearly", parse("@yearly"), "2031-07-01T00:00:00Z", "2031-01-01T00:00:00Z", "2032-01-01T00:00:00Z"},
		{"dense-then-sparse", parse("* 0 0 * * *"), "2031-05-06T12:00:00Z", "2031-05-06T00:00:59Z", "2031-05-07T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, n, err := cronlock.Plan(tt.sched, at(tt.now))
			if err != nil {
				t.Fatal(err)
			}
			if !p.Equal(at(tt.planned)) || !n.Equal(at(tt.next)) {
				t.Errorf("Plan(%s) = %v, %v; want %s, %s", tt.now, p.UTC(), n.UTC(), tt.planned, tt.next)
			}
		})
	}
	for _, s := range []cron.Schedule{never{}, nonAdvancing{}} {
		if _, _, err := cronlock.Plan(s, base); !errors.Is(err, cronlock.ErrInvalidSchedule) {
			t.Errorf("Plan(%T) = %v, want ErrInvalidSchedule", s, err)
		}
	}
}

// TestAddFuncAlignsEvery: AddFunc gives the cron an epoch-aligned
// "@every", so every node fires at the same instants whenever it started.
func TestAddFuncAlignsEvery(t *testing.T) {
	client := mustNew(core.NewMemory())
	t.Cleanup(func() { client.Close() })
	l := mustNew(cronlock.New(client))
	c := cron.New()
	ids := map[cron.EntryID]int64{}
	for _, d := range []int64{7, 10, 3600} {
		id, err := l.AddFunc(c, "@every "+time.Duration(d*int64(time.Second)).String(), "aligned-"+itoa(d), noop)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = d
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()
	for id, d := range ids {
		next := c.Entry(id).Next
		if next.IsZero() || next.Nanosecond() != 0 || next.Unix()%d != 0 {
			t.Errorf("@every %ds: next fire %v is not a multiple of %ds since the epoch", d, next, d)
		}
	}
}

// TestPanicDoesNotKillCron: a job that panics on every tick on a real
// cron.Cron (with no Recover in its chain) keeps being run: the panic
// never reaches the cron's goroutine.
func TestPanicDoesNotKillCron(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	stop := mrclock.Run(mr)
	t.Cleanup(stop)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	l, _, logs := newLocker(t, rdb, "a", cronlock.WithSeconds())
	c := cron.New(cron.WithSeconds())
	var calls atomic.Int32
	if _, err := l.AddFunc(c, "* * * * * *", jobName(t), func(context.Context) error {
		calls.Add(1)
		panic("boom")
	}); err != nil {
		t.Fatal(err)
	}
	c.Start()
	waitFor(t, "two panicking runs", 10*time.Second, func() bool { return calls.Load() >= 2 })
	<-c.Stop().Done()
	if n := len(logs.find("job panicked")); n < 2 {
		t.Errorf("%d panics logged, want at least 2:\n%s", n, logs)
	}
	run, err := l.LastRun(context.Background(), jobName(t))
	if err != nil || run.Error == "" {
		t.Errorf("LastRun = %+v, %v", run, err)
	}
}
