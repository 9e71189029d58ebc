package otel

import (
	"context"
	"errors"
	"time"

	"github.com/latchkey/latchkey/cronlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TickStart implements cronlock.Observer: it starts a latchkey.cron.run
// span as a child of ctx's span and returns a context carrying it, so the
// tick's claim, its running lease (latchkey.acquire, latchkey.release) and
// the spans the job function starts nest under it. The returned func ends
// the span and counts the tick in latchkey.cron.runs by outcome: ran,
// skipped (with latchkey.cron.skip_reason), failed, lost. A catch-up run
// of a missed tick (cronlock.WithMissed) has latchkey.cron.catch_up true
// on its span (false on every other) and on its measurements (absent on
// the others).
//
// A skip by contention — the tick claimed by another node, the previous
// run still running — is an outcome (status Unset); a skip because Redis
// failed or the client was closed, a failed run and a lost lease are
// errors (status Error, error.type). A run that lost its running lease
// also gets a latchkey.lease.lost event. Metrics carry at most
// WithNameLimit distinct job names, later ones as "_OTHER"; the span
// carries the name itself.
func (in *Instrumentation) TickStart(ctx context.Context, t cronlock.Tick) (context.Context, func(cronlock.TickResult)) {
	ctx, span := in.tracer.Start(ctx, spanCronRun, in.startOpts...)
	if span.IsRecording() {
		ctx = context.WithValue(ctx, tickSpanKey{}, span.SpanContext())
	}
	return ctx, func(r cronlock.TickResult) { in.tickEnd(ctx, span, t, r) }
}

// tickSpanKey marks a context whose span is a latchkey.cron.run span; its
// value is that span's context.
type tickSpanKey struct{}

// isTickSpan reports whether span is the cron run span of ctx.
func isTickSpan(ctx context.Context, span trace.Span) bool {
	sc, ok := ctx.Value(tickSpanKey{}).(trace.SpanContext)
	return ok && span != nil && sc.Equal(span.SpanContext())
}

// tickErrorType names the failure of a tick, or "" when it did not fail.
func tickErrorType(r cronlock.TickResult) string {
	if r.Err == nil {
		return ""
	}
	switch r.Outcome {
	case cronlock.OutcomeLost:
		return errLost
	case cronlock.OutcomeSkipped:
		return errorType(r.Err, errBackend)
	}
	switch {
	case errors.Is(r.Err, cronlock.ErrPanic):
		return errPanic
	case errors.Is(r.Err, cronlock.ErrMaxHold):
		return errMaxHold
	}
	return errorType(r.Err, otherName)
}

func (in *Instrumentation) tickEnd(ctx context.Context, span trace.Span, t cronlock.Tick, r cronlock.TickResult) {
	outcome, skip, errType := r.Outcome.String(), r.Skip.String(), tickErrorType(r)
	in.m.cronRuns.Add(ctx, 1, in.cronSeries(seriesCronRuns, t.Name, skip, outcome, errType, t.CatchUp).add...)
	ran := r.Outcome != cronlock.OutcomeSkipped
	if ran {
		in.m.cronDuration.Record(ctx, r.Duration.Seconds(), in.cronSeries(seriesCronDuration, t.Name, "", outcome, errType, t.CatchUp).rec...)
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+10)
		attrs = append(attrs, in.cfg.attrs...)
		attrs = append(attrs,
			keyCronJob.String(t.Name),
			keyCronPlanned.String(t.Planned.UTC().Format(time.RFC3339Nano)),
			keyCronNode.String(t.Node),
			keyOutcome.String(outcome),
			keyCronLocked.Bool(r.Locked),
			keyCronCatchUp.Bool(t.CatchUp),
		)
		if skip != "" {
			attrs = append(attrs, keyCronSkip.String(skip))
		}
		if r.Locked {
			attrs = append(attrs, keyFence.Int64(r.Fence))
		}
		if ran {
			attrs = append(attrs, keyCronDuration.Float64(r.Duration.Seconds()))
		}
		if errType != "" {
			attrs = append(attrs, keyErrorType.String(errType))
		}
		span.SetAttributes(attrs...)
	}
	if r.Outcome == cronlock.OutcomeLost {
		span.AddEvent(eventLost, trace.WithAttributes(keyFence.Int64(r.Fence), keyErrorType.String(errLost)))
	}
	if errType != "" {
		span.SetStatus(codes.Error, r.Err.Error())
	}
	span.End()
}

// TicksMissed implements cronlock.MissedObserver: it counts the missed
// ticks a look-back found in latchkey.cron.missed, by what the policy does
// with them — catch_up (run now, each a latchkey.cron.run span of its own
// with latchkey.cron.catch_up) and skipped (left missed) — and adds a
// latchkey.cron.missed event, with the count, how many are caught up and
// the planned times of the first and the last, to the span of ctx: the
// latchkey.cron.run span of the tick that found them, if one did.
func (in *Instrumentation) TicksMissed(ctx context.Context, m cronlock.MissedTicks) {
	if m.CatchUp > 0 {
		in.m.cronMissed.Add(ctx, int64(m.CatchUp), in.cronSeries(seriesCronMissed, m.Name, "", outcomeCatchUp, "", false).add...)
	}
	if left := m.Count - m.CatchUp; left > 0 {
		in.m.cronMissed.Add(ctx, int64(left), in.cronSeries(seriesCronMissed, m.Name, "", outcomeSkipped, "", false).add...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventCronMissed, trace.WithAttributes(
			keyMissedCount.Int(m.Count),
			keyMissedRun.Int(m.CatchUp),
			keyMissedFirst.String(m.First.UTC().Format(time.RFC3339Nano)),
			keyMissedLast.String(m.Last.UTC().Format(time.RFC3339Nano)),
		))
	}
}
