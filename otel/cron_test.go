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
