package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestCronRun: each way a tick ends is one latchkey.cron.run span with the
// job, planned time, node and outcome, and one latchkey.cron.runs count
// with the same outcome and error.type; the running lease's lock spans and
// the job's own spans nest under it.
func TestCronRun(t *testing.T) {
	planned := time.Date(2031, 5, 6, 7, 0, 10, 0, time.UTC)
	tests := []struct {
		name     string
		job      func(ctx context.Context, del func()) error
		before   func(ctx context.Context, j cron.Job) // runs first
		down     bool
		outcome  string
		skip     string
		errType  string
		ranLocks bool // the running lease was taken
	}{
		{name: "ran", job: func(context.Context, func()) error { return nil }, outcome: "ran", ranLocks: true},
		{name: "claimed", job: func(context.Context, func()) error { return nil },
			before: func(_ context.Context, j cron.Job) { j.Run() }, outcome: "skipped", skip: "claimed"},
		{name: "failed", job: func(context.Context, func()) error { return errors.New("ledger offline") },
			outcome: "failed", errType: "_OTHER", ranLocks: true},
		{name: "panicked", job: func(context.Context, func()) error { panic("nil map") },
			outcome: "failed", errType: "panic", ranLocks: true},
		{name: "lost", job: func(ctx context.Context, del func()) error {
			del()
			<-ctx.Done()
			return context.Cause(ctx)
		}, outcome: "lost", errType: "lost", ranLocks: true},
		{name: "redis-down", job: func(context.Context, func()) error { return nil }, down: true,
			outcome: "skipped", skip: "error", errType: "backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t)
			client, rdb, mr := redisClient(t, tel.inst)
			jobName := "settle"
			var jobSpan trace.SpanContext
			newJob := func(node string, inst cronlock.Observer) cron.Job {
				opts := []cronlock.Option{cronlock.WithNodeID(node), cronlock.WithLogger(cron.DiscardLogger),
					cronlock.WithClock(func() time.Time { return planned.Add(time.Second) }),
					cronlock.WithLeaseTTL(150 * time.Millisecond)}
				c := client
				if inst != nil {
					opts = append(opts, cronlock.WithObserver(inst))
				} else {
					c = mustNew(core.NewRedis(rdb))
					t.Cleanup(func() { c.Close() })
				}
				j, err := mustNew(cronlock.New(c, opts...)).Job(jobName, cron.Every(10*time.Second), func(ctx context.Context) error {
					if node == "node-a" {
						var span trace.Span
						ctx, span = tel.tp.Tracer("test").Start(ctx, "work")
						defer span.End()
						jobSpan = span.SpanContext()
					}
					return tt.job(ctx, func() { mr.Del("latchkey:{cron:" + jobName + ":running}") })
				})
				if err != nil {
					t.Fatal(err)
				}
				return j
			}
			j := newJob("node-a", tel.inst)
			if tt.before != nil {
				tt.before(context.Background(), newJob("node-b", nil))
			}
			if tt.down {
				mr.Close()
			}
			j.Run()

			run := tel.span(t, "latchkey.cron.run")
			status := codes.Unset
			want := []attribute.KeyValue{
				attribute.String("latchkey.cron.job", jobName),
				attribute.String("latchkey.cron.planned", "2031-05-06T07:00:10Z"),
				attribute.String("latchkey.cron.node", "node-a"),
				outcome.String(tt.outcome),
				attribute.Bool("latchkey.cron.locked", tt.ranLocks),
			}
			if tt.skip != "" {
				want = append(want, attribute.String("latchkey.cron.skip_reason", tt.skip))
			}
			if tt.errType != "" {
				status = codes.Error
				want = append(want, errType.String(tt.errType))
			}
			checkSpan(t, run, trace.SpanContext{}, status, want...)
			a := attrs(run)
			if _, ok := a["latchkey.cron.run.duration"]; ok != (tt.skip == "") {
				t.Errorf("run duration present = %v", ok)
			}
			if f, ok := a["latchkey.lock.fence"]; ok != tt.ranLocks || ok && f.AsInt64() <= 0 {
				t.Errorf("fence %v (present %v)", f.String(), ok)
			}
			if tt.ranLocks {
				checkSpan(t, tel.span(t, "latchkey.acquire"), run.SpanContext(), codes.Unset, name.String("cron"))
				rel := tel.span(t, "latchkey.release")
				if rel.Parent().SpanID() != run.SpanContext().SpanID() {
					t.Errorf("release span's parent %v, want the run", rel.Parent().SpanID())
				}
				if w := tel.span(t, "work"); w.Parent().SpanID() != run.SpanContext().SpanID() || !w.SpanContext().Equal(jobSpan) {
					t.Errorf("the job's span is not a child of the run")
				}
			} else if len(tel.spans("work")) != 0 {
				t.Errorf("the job ran: %s", tel.names())
			}
			if tt.outcome == "lost" {
				if ev := run.Events(); len(ev) != 1 || ev[0].Name != "latchkey.lease.lost" {
					t.Errorf("run events %v, want latchkey.lease.lost", ev)
				}
				// core tells the observer just after the job's context ends.
				waitFor(t, "the latchkey.lost span", 5*time.Second, func() bool { return len(tel.spans("latchkey.lost")) == 1 })
				checkSpan(t, tel.span(t, "latchkey.lost"), tel.span(t, "latchkey.acquire").SpanContext(), codes.Error)
			}

			m := tel.collect(t)
			ps := points(m["latchkey.cron.runs"])
			if len(ps) != 1 || ps[0].value != 1 {
				t.Fatalf("cron.runs points %+v", ps)
			}
			got := map[string]string{}
			for _, kv := range ps[0].attrs.ToSlice() {
				got[string(kv.Key)] = kv.Value.AsString()
			}
			wantM := map[string]string{"latchkey.cron.job": jobName, "latchkey.outcome": tt.outcome}
			if tt.skip != "" {
				wantM["latchkey.cron.skip_reason"] = tt.skip
			}
			if tt.errType != "" {
				wantM["error.type"] = tt.errType
			}
			if len(got) != len(wantM) {
				t.Errorf("cron.runs attributes %v, want %v", got, wantM)
			}
			for k, v := range wantM {
				if got[k] != v {
					t.Errorf("cron.runs %s = %q, want %q", k, got[k], v)
				}
			}
			if n := len(points(m["latchkey.cron.run.duration"])); n != map[bool]int{true: 0, false: 1}[tt.skip != ""] {
				t.Errorf("%d run duration points", n)
			}
		})
	}
}

// TestCronMissed: a paused process ran a job's tick of :10 and slept
// through :20, :30 and :40; at :50, with cronlock.MissedRunAll(2), the
// tick's span gets a latchkey.cron.missed event (3 missed, 2 caught up,
// from :20 to :40), latchkey.cron.missed counts 2 catch_up and 1 skipped,
// and the catch-up runs of :30 and :40 are latchkey.cron.run spans of
// their own, children of the :50 tick's, with latchkey.cron.catch_up true
// on the span and on their latchkey.cron.runs count.
func TestCronMissed(t *testing.T) {
	tel := newTelemetry(t)
	client, _, _ := redisClient(t, tel.inst)
	at := time.Date(2031, 5, 6, 7, 0, 10, 0, time.UTC)
	l := mustNew(cronlock.New(client, cronlock.WithObserver(tel.inst), cronlock.WithNodeID("node-a"),
		cronlock.WithMissed(cronlock.MissedRunAll(2)), cronlock.WithSpread(false), cronlock.WithLogger(cron.DiscardLogger),
		cronlock.WithClock(func() time.Time { return at })))
	j, err := l.Job("settle", cron.Every(10*time.Second), func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	j.Run()
	at = at.Add(40 * time.Second)
	j.Run()

	var tick sdktrace.ReadOnlySpan
	var catchUps []sdktrace.ReadOnlySpan
	for _, s := range tel.spans("latchkey.cron.run") {
		a := attrs(s)
		switch {
		case a["latchkey.cron.catch_up"].AsBool():
			catchUps = append(catchUps, s)
		case a["latchkey.cron.planned"].AsString() == "2031-05-06T07:00:50Z":
			tick = s
		}
		if _, ok := a["latchkey.cron.catch_up"]; !ok {
			t.Errorf("span of %s has no latchkey.cron.catch_up", a["latchkey.cron.planned"].AsString())
		}
	}
	if tick == nil || len(catchUps) != 2 {
		t.Fatalf("the :50 tick's span %v, %d catch-up spans; have %s", tick != nil, len(catchUps), tel.names())
	}
	for i, s := range catchUps {
		want := []string{"2031-05-06T07:00:30Z", "2031-05-06T07:00:40Z"}[i]
		checkSpan(t, s, tick.SpanContext(), codes.Unset, attribute.String("latchkey.cron.planned", want), outcome.String("ran"))
	}
	ev := tick.Events()
	if len(ev) != 1 || ev[0].Name != "latchkey.cron.missed" {
		t.Fatalf("events of the :50 tick %v, want latchkey.cron.missed", ev)
	}
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range ev[0].Attributes {
		got[kv.Key] = kv.Value
	}
	if got["latchkey.cron.missed.count"].AsInt64() != 3 || got["latchkey.cron.missed.catch_up"].AsInt64() != 2 ||
		got["latchkey.cron.missed.first"].AsString() != "2031-05-06T07:00:20Z" || got["latchkey.cron.missed.last"].AsString() != "2031-05-06T07:00:40Z" {
		t.Errorf("event attributes %v", ev[0].Attributes)
	}
	job := attribute.String("latchkey.cron.job", "settle")
	for _, c := range []struct {
		metric string
		want   float64
		kv     []attribute.KeyValue
	}{
		{"latchkey.cron.missed", 2, []attribute.KeyValue{job, outcome.String("catch_up")}},
		{"latchkey.cron.missed", 1, []attribute.KeyValue{job, outcome.String("skipped")}},
		{"latchkey.cron.runs", 2, []attribute.KeyValue{job, outcome.String("ran"), attribute.Bool("latchkey.cron.catch_up", true)}},
		{"latchkey.cron.runs", 4, []attribute.KeyValue{job, outcome.String("ran")}},
	} {
		if v := tel.value(t, c.metric, c.kv...); v != c.want {
			t.Errorf("%s %v = %v, want %v", c.metric, c.kv, v, c.want)
		}
	}
}
