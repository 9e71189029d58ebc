package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// ActivityLockStart implements temporallock.Observer (whose signature uses
// only standard types, so this package does not import the Temporal SDK):
// it starts a latchkey.activity.lock span as a child of ctx's span and
// returns a context carrying it, which the interceptor uses to take the
// lock and run the activity — so the latchkey.acquire and latchkey.release
// spans of an observed core.Client, and the activity's own spans, nest
// under it.
//
// The returned func ends the span with the activity type
// (latchkey.activity.type), the outcome (ran, busy, lost, unavailable,
// canceled, invalid) and the fence, and counts the execution in
// latchkey.activity.locks. Ran and busy are outcomes, status Unset (an
// activity's own error is the activity's, not the lock's); lost,
// unavailable, canceled and invalid set status Error and error.type (lost,
// lock_unavailable, canceled, invalid_argument), the same on span and
// metric. No key is recorded. Activity types should be few, but workflow
// code chooses them (RegisterDynamicActivity): the metric carries at most
// WithNameLimit distinct ones, later ones as "_OTHER"; the span carries
// the type itself.
func (in *Instrumentation) ActivityLockStart(ctx context.Context, activityType string) (context.Context, func(outcome string, fence int64, err error)) {
	ctx, span := in.tracer.Start(ctx, spanActivityLock, in.startOpts...)
	return ctx, func(outcome string, fence int64, err error) {
		errType := activityErrorType(outcome)
		if in.m.activityLock.Enabled(ctx) {
			in.m.activityLock.Add(ctx, 1, in.activitySeries(activityType, outcome, errType).add...)
		}
		if span.IsRecording() {
			attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+4)
			attrs = append(attrs, in.cfg.attrs...)
			attrs = append(attrs, keyActivityType.String(activityType), keyOutcome.String(outcome))
			if fence > 0 {
				attrs = append(attrs, keyFence.Int64(fence))
			}
			if errType != "" {
				attrs = append(attrs, keyErrorType.String(errType))
			}
			span.SetAttributes(attrs...)
		}
		if errType != "" {
			msg := outcome
			if err != nil {
				msg = err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
		span.End()
	}
}

// activityErrorType is the error.type of an activity lock outcome, "" for
// the outcomes that are not errors.
func activityErrorType(outcome string) string {
	switch outcome {
	case "ran", "busy":
		return ""
	case "lost":
		return errLost
	case "unavailable":
		return errLockDown
	case "canceled":
		return errCanceled
	case "invalid":
		return errInvalid
	}
	return otherName
}

// activityAttrs builds the attributes of an activity lock metric series.
func (in *Instrumentation) activityAttrs(k seriesKey) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+3)
	attrs = append(attrs, in.cfg.attrs...)
	attrs = append(attrs, keyActivityType.String(k.name), keyOutcome.String(k.outcome))
	if k.errType != "" {
		attrs = append(attrs, keyErrorType.String(k.errType))
	}
	return attrs
}
