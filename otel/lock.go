package otel

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/core"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// OpStart implements core.Observer: it starts the operation's span
// (latchkey.acquire, latchkey.release, latchkey.extend; latchkey.renew only
// with WithRenewalSpans) as a child of ctx's span, and returns a context
// carrying it, so the Redis command spans of go-redis's own OpenTelemetry
// hook nest under it. The returned func ends the span and records the
// operation's metrics.
func (in *Instrumentation) OpStart(ctx context.Context, op core.Op, key string, kind core.Kind) (context.Context, func(core.OpResult)) {
	if op == core.OpWait { // no span: the acquisition's has the wait
		s := in.lockSeries(seriesWaiters, in.lockName(key), kind, "", "", "")
		in.m.waiters.Add(ctx, 1, s.add...)
		return ctx, func(core.OpResult) { in.m.waiters.Add(context.Background(), -1, s.add...) }
	}
	start := time.Now()
	var caller, span trace.Span
	if op == core.OpAcquire {
		caller = trace.SpanFromContext(ctx)
	}
	spanCtx := context.Background()
	if op != core.OpRenew || in.cfg.renewSpans {
		// A renewal's ctx is its lease's (see core.Observer): its span is
		// a child of the lease's acquire span.
		ctx, span = in.tracer.Start(ctx, opSpanName(op), in.startOpts...)
		spanCtx = ctx
	}
	if op == core.OpAcquire {
		// The lease keeps this ctx and hands it back at its loss: the
		// caller's span rides along for the latchkey.lease.lost event.
		ctx = context.WithValue(ctx, leaseCallerKey{}, leaseCaller{span: caller, isTick: isTickSpan(ctx, caller)})
	}
	return ctx, func(r core.OpResult) { in.opEnd(spanCtx, op, key, kind, start, span, r) }
}

// leaseCallerKey carries, in a lease's context, the span that was current
// when the lease was taken.
type leaseCallerKey struct{}

type leaseCaller struct {
	span   trace.Span
	isTick bool // a latchkey.cron.run span (see TickStart)
}

func opSpanName(op core.Op) string {
	switch op {
	case core.OpAcquire:
		return spanAcquire
	case core.OpRelease:
		return spanRelease
	case core.OpExtend:
		return spanExtend
	case core.OpRenew:
		return spanRenew
	}
	return "latchkey." + op.String()
}

// opOutcome names the outcome of an operation and, for a failure, its
// error type ("" when it did not fail).
func opOutcome(op core.Op, r core.OpResult) (outcome, errType string) {
	switch {
	case r.Err == nil && r.Reentered:
		return outcomeReentered, ""
	case r.Lost && op == core.OpRelease:
		if r.Err != nil {
			return outcomeLost, errLost
		}
		return outcomeLost, ""
	case r.Err == nil:
		switch op {
		case core.OpAcquire:
			return outcomeAcquired, ""
		case core.OpRelease:
			return outcomeReleased, ""
		case core.OpExtend:
			return outcomeExtended, ""
		}
		return outcomeRenewed, ""
	case op == core.OpAcquire && isContention(r.Err):
		return outcomeContended, ""
	}
	t := errorType(r.Err, errBackend)
	if t == errNotHeld {
		return outcomeNotHeld, t
	}
	return outcomeFailed, t
}

// opEnd ends an operation: metrics and the span.
func (in *Instrumentation) opEnd(ctx context.Context, op core.Op, key string, kind core.Kind, start time.Time, span trace.Span, r core.OpResult) {
	d := time.Since(start)
	name := in.lockName(key)
	outcome, errType := opOutcome(op, r)
	// Enabled is false for no-op instruments: skip building their series.
	// The held count is always recorded, so that its ups and downs match
	// even if a global provider is installed while locks are held.
	if in.m.opDuration.Enabled(ctx) {
		in.m.opDuration.Record(ctx, d.Seconds(), in.lockSeries(seriesOp, name, kind, op.String(), outcome, errType).rec...)
	}
	switch {
	case op == core.OpAcquire && !r.Reentered:
		if in.m.waitDuration.Enabled(ctx) {
			in.m.waitDuration.Record(ctx, r.Wait.Seconds(), in.lockSeries(seriesWait, name, kind, "", outcome, errType).rec...)
		}
		if r.Err == nil {
			in.m.heldCount.Add(ctx, 1, in.lockSeries(seriesHeldCount, name, kind, "", "", "").add...)
			if kind == core.KindLeader {
				in.m.leaderChanges.Add(ctx, 1, in.lockSeries(seriesLeader, name, kind, "", outcomeElected, "").add...)
			}
		}
	case op == core.OpRelease && !r.Reentered:
		// A lost lease was counted out by LeaseLost: core calls it once
		// for every lease a release reports Lost, before the release ends.
		if !r.Lost {
			in.m.heldCount.Add(ctx, -1, in.lockSeries(seriesHeldCount, name, kind, "", "", "").add...)
			if in.m.heldDuration.Enabled(ctx) {
				in.m.heldDuration.Record(ctx, r.Held.Seconds(), in.lockSeries(seriesHeld, name, kind, "", outcome, "").rec...)
			}
			if kind == core.KindLeader {
				in.m.leaderChanges.Add(ctx, 1, in.lockSeries(seriesLeader, name, kind, "", outcomeResigned, "").add...)
			}
		}
	}
	if span == nil {
		return
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+9)
		attrs = append(attrs, in.cfg.attrs...)
		attrs = append(attrs, keyLockName.String(name), keyLockKind.String(string(kind)), keyOperation.String(op.String()), keyOutcome.String(outcome))
		switch op {
		case core.OpAcquire:
			attrs = append(attrs, keyAttempts.Int(r.Attempts))
			if !r.Reentered {
				attrs = append(attrs, keyWait.Float64(r.Wait.Seconds()))
			}
			if r.Err == nil {
				attrs = append(attrs, keyFence.Int64(r.Fence))
			}
		case core.OpRelease:
			attrs = append(attrs, keyFence.Int64(r.Fence))
			if !r.Reentered {
				attrs = append(attrs, keyHeld.Float64(r.Held.Seconds()))
			}
		default:
			attrs = append(attrs, keyFence.Int64(r.Fence))
		}
		attrs = in.spanKeyAttrs(attrs, key)
		if errType != "" {
			attrs = append(attrs, keyErrorType.String(errType))
		}
		span.SetAttributes(attrs...)
	}
	if errType != "" {
		span.SetStatus(codes.Error, r.Err.Error())
	}
	span.End()
}

// LeaseLost implements core.Observer: it counts the loss, takes the lease
// out of the held count and records how long it was held, and emits a
// latchkey.lost span with error status — a child of the lease's
// latchkey.acquire span (ctx is the lease's context), so the loss shows in
// the trace that took the lock — and a latchkey.lease.lost event on the
// span that was current at the acquisition, if that span is still
// recording (the caller of Client.Do). A cron run's span gets the event
// from the run's own result instead (see TickStart).
func (in *Instrumentation) LeaseLost(ctx context.Context, key string, kind core.Kind, fence int64, held time.Duration, cause error) {
	name := in.lockName(key)
	mctx := context.Background()
	in.m.heldCount.Add(mctx, -1, in.lockSeries(seriesHeldCount, name, kind, "", "", "").add...)
	in.m.losses.Add(mctx, 1, in.lockSeries(seriesLosses, name, kind, "", "", "").add...)
	in.m.heldDuration.Record(mctx, held.Seconds(), in.lockSeries(seriesHeld, name, kind, "", outcomeLost, "").rec...)
	if kind == core.KindLeader {
		in.m.leaderChanges.Add(mctx, 1, in.lockSeries(seriesLeader, name, kind, "", outcomeLost, "").add...)
	}

	_, span := in.tracer.Start(ctx, spanLost, in.startOpts...)
	attrs := []attribute.KeyValue{
		keyLockName.String(name), keyLockKind.String(string(kind)), keyFence.Int64(fence), keyHeld.Float64(held.Seconds()), keyErrorType.String(errLost),
	}
	if span.IsRecording() {
		full := append(append(append(make([]attribute.KeyValue, 0, len(in.cfg.attrs)+6), in.cfg.attrs...), attrs...), keyOutcome.String(outcomeLost))
		span.SetAttributes(in.spanKeyAttrs(full, key)...)
	}
	msg := "lease lost"
	if cause != nil {
		msg = cause.Error()
	}
	span.SetStatus(codes.Error, msg)
	span.End()
	// A cron run adds the event itself when it ends (its TickResult says
	// lost): core may call LeaseLost only after the run has ended.
	if c, ok := ctx.Value(leaseCallerKey{}).(leaseCaller); ok && c.span != nil && !c.isTick && c.span.IsRecording() {
		c.span.AddEvent(eventLost, trace.WithAttributes(attrs...))
	}
}
