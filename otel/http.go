package otel

import (
	"context"
	"errors"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// DecisionStart implements httpidem.Observer, for the middlewares of
// packages httpidem and echomw and the interceptors of package grpcmw. It
// starts a span named after the decision's kind (latchkey.idempotency,
// latchkey.daily, latchkey.paramlock, latchkey.limit) as a child of ctx's
// span (the HTTP request's or the gRPC call's). It returns a context
// carrying that span, which the middleware uses for its store calls, so the
// Redis command spans of go-redis's own OpenTelemetry hook, and the lock
// spans of an observed core.Client, nest under it. The handler that runs
// under the decision nests under it too.
//
// The returned func ends the span with the request's last outcome
// (latchkey.outcome), its scope (latchkey.http.scope, when not empty), and
// counts the request in latchkey.idempotency.requests or
// latchkey.daily.claims. The locks of ParamLock (and grpcmw's Lock) and the
// permits of Limit are measured by the core.Client's own metrics, so their
// decisions have a span and no metric.
//
// A duplicate, a replay, a request in flight elsewhere, a mismatch, a
// contended lock, an invalid request (a 4xx) and a response not stored by
// policy are outcomes: status Unset. These set status Error and error.type:
// a store error (the same with FailOpen), a lost lease or lock, a claim or
// lease that could not be given back, and a 5xx the middleware answered
// for its own configuration. No keys, principals or subjects are recorded.
func (in *Instrumentation) DecisionStart(ctx context.Context, kind, scope string) (context.Context, func(httpidem.Decision)) {
	ctx, span := in.tracer.Start(ctx, decisionSpanName(kind), in.startOpts...)
	return ctx, func(d httpidem.Decision) { in.decisionEnd(ctx, span, kind, scope, d) }
}

func decisionSpanName(kind string) string {
	switch kind {
	case httpidem.KindIdempotency:
		return spanIdempotency
	case httpidem.KindDaily:
		return spanDaily
	case httpidem.KindParamLock:
		return spanParamLock
	case httpidem.KindLimit:
		return spanLimit
	}
	return "latchkey." + kind
}

// decisionErrorType names the failure of a decision, or "" when it is an
// outcome.
func decisionErrorType(d httpidem.Decision) string {
	switch {
	case d.Outcome == httpidem.OutcomeLost, errors.Is(d.Err, core.ErrLost): // httpidem.ErrLost too
		return errLost
	case d.Outcome == httpidem.OutcomeStoreError,
		d.Outcome == httpidem.OutcomeReleased && d.Err != nil,
		d.Outcome == httpidem.OutcomeNotStored && errors.Is(d.Err, httpidem.ErrUnavailable):
		if errors.Is(d.Err, httpidem.ErrInvalidArgument) {
			return errInvalid
		}
		return errorType(d.Err, errBackend)
	case d.Status >= 500:
		return errMisconfig
	}
	return ""
}

func (in *Instrumentation) decisionEnd(ctx context.Context, span trace.Span, kind, scope string, d httpidem.Decision) {
	outcome := string(d.Outcome)
	if outcome == "" {
		outcome = otherName
	}
	errType := decisionErrorType(d)
	switch kind {
	case httpidem.KindIdempotency:
		if in.m.idemRequests.Enabled(ctx) {
			in.m.idemRequests.Add(ctx, 1, in.httpSeries(seriesIdemRequests, scope, outcome, errType).add...)
		}
	case httpidem.KindDaily:
		if in.m.dailyClaims.Enabled(ctx) {
			in.m.dailyClaims.Add(ctx, 1, in.httpSeries(seriesDailyClaims, scope, outcome, errType).add...)
		}
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+3)
		attrs = append(attrs, in.cfg.attrs...)
		if scope != "" {
			attrs = append(attrs, keyHTTPScope.String(scope))
		}
		attrs = append(attrs, keyOutcome.String(outcome))
		if errType != "" {
			attrs = append(attrs, keyErrorType.String(errType))
		}
		span.SetAttributes(attrs...)
	}
	if errType != "" {
		msg := outcome
		if d.Err != nil {
			msg = d.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}
