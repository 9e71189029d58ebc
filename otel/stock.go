package otel

import (
	"context"
	"errors"

	"github.com/latchkey/latchkey/dbguard"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// DeductStart implements dbguard.Observer: it starts a latchkey.stock.deduct
// span as a child of ctx's span and returns a context carrying it, which
// the Guard uses for its SQL statements and its lock calls — so the
// latchkey.acquire spans of an observed core.Client (and any database/sql
// instrumentation's spans) nest under the deduction.
//
// The returned func ends the span with the strategy that decided
// (latchkey.stock.strategy: locked, optimistic, row_lock, atomic), whether
// Auto fell back (latchkey.stock.fallback), the optimistic attempts lost to
// concurrent writers (latchkey.stock.retries) and the outcome (deducted,
// insufficient, unknown_sku, busy, failed); it counts the deduction in
// latchkey.stock.deductions and the lost attempts in
// latchkey.stock.optimistic.retries. Insufficient stock, an unknown SKU and
// busy (contention outlasted the Guard's bounds) are outcomes, status
// Unset; only a failure sets status Error and error.type (the same on the
// span and the metric). SKUs are never recorded.
func (in *Instrumentation) DeductStart(ctx context.Context, op string, strategy dbguard.Strategy) (context.Context, func(dbguard.DeductResult)) {
	ctx, span := in.tracer.Start(ctx, spanStockDeduct, in.startOpts...)
	return ctx, func(r dbguard.DeductResult) { in.deductEnd(ctx, span, op, r) }
}

// strategyName is the attribute value of a dbguard strategy.
func strategyName(s dbguard.Strategy) string {
	switch s {
	case dbguard.Auto:
		return "auto"
	case dbguard.Locked:
		return "locked"
	case dbguard.Optimistic:
		return "optimistic"
	case dbguard.RowLock:
		return "row_lock"
	case dbguard.Atomic:
		return "atomic"
	}
	return otherName
}

// deductErrorType names the failure of a deduction.
func deductErrorType(err error) string {
	switch {
	case errors.Is(err, dbguard.ErrUnavailable):
		return errLockDown
	case errors.Is(err, dbguard.ErrStaleFence):
		return errStale
	case errors.Is(err, dbguard.ErrInvalidSKU), errors.Is(err, dbguard.ErrInvalidQty),
		errors.Is(err, dbguard.ErrInvalidOption), errors.Is(err, dbguard.ErrNilDB):
		return errInvalid
	}
	return errorType(err, errDatabase)
}

func (in *Instrumentation) deductEnd(ctx context.Context, span trace.Span, op string, r dbguard.DeductResult) {
	outcome := r.Outcome()
	errType := ""
	switch outcome {
	case dbguard.OutcomeFailed:
		errType = deductErrorType(r.Err)
	case dbguard.OutcomeUnknown: // the buyer cannot tell whether a unit was taken
		errType = errUnknown
	}
	strategy := strategyName(r.Strategy)
	if in.m.stockDeducts.Enabled(ctx) {
		in.m.stockDeducts.Add(ctx, 1, in.stockSeries(seriesStockDeducts, strategy, outcome, errType).add...)
	}
	if r.Retries > 0 && in.m.stockRetries.Enabled(ctx) {
		in.m.stockRetries.Add(ctx, int64(r.Retries), in.stockSeries(seriesStockRetries, strategy, "", "").add...)
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+6)
		attrs = append(attrs, in.cfg.attrs...)
		attrs = append(attrs, keyOperation.String(op), keyStockStrat.String(strategy), keyStockFall.Bool(r.Fallback),
			keyStockRetries.Int(r.Retries), keyOutcome.String(outcome))
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

// stockAttrs builds the attributes of a stock metric series.
func (in *Instrumentation) stockAttrs(k seriesKey) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(in.cfg.attrs)+3)
	attrs = append(attrs, in.cfg.attrs...)
	attrs = append(attrs, keyStockStrat.String(k.name))
	if k.outcome != "" {
		attrs = append(attrs, keyOutcome.String(k.outcome))
	}
	if k.errType != "" {
		attrs = append(attrs, keyErrorType.String(k.errType))
	}
	return attrs
}

func (in *Instrumentation) stockSeries(metric uint8, strategy, outcome, errType string) *series {
	return in.series.get(seriesKey{metric: metric, name: strategy, outcome: outcome, errType: errType}, in.stockAttrs)
}
