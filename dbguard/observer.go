package dbguard

import (
	"context"
	"errors"
)

// An Observer is told about every deduction a Guard makes, for tracing and
// metrics (package otel's Instrumentation is one). Install it with
// WithObserver. Its methods must be safe for concurrent use and quick: they
// run on the deduction's path.
type Observer interface {
	// DeductStart is called when a Deduct or DeductMany call that passed
	// its input checks starts (op is OpDeduct or OpDeductMany; strategy the
	// Guard's Strategy()). The context it returns is used for every SQL
	// statement and lock call of the deduction, so spans started there nest
	// under the observer's span; a nil context means ctx. The returned func
	// (which may be nil) is called once, when the deduction ends.
	DeductStart(ctx context.Context, op string, strategy Strategy) (context.Context, func(DeductResult))
}

// Operations reported to Observer.DeductStart.
const (
	OpDeduct     = "deduct"      // Guard.Deduct
	OpDeductMany = "deduct_many" // Guard.DeductMany
)

// Outcomes of a deduction (DeductResult.Outcome).
const (
	OutcomeDeducted     = "deducted"     // the units were committed
	OutcomeInsufficient = "insufficient" // ErrInsufficientStock
	OutcomeUnknownSKU   = "unknown_sku"  // ErrUnknownSKU
	OutcomeBusy         = "busy"         // ErrBusy: contention outlasted the bounds
	OutcomeFailed       = "failed"       // any other error (database, lock service, context)
	// OutcomeUnknown is ErrOutcomeUnknown: the answer to the write was
	// lost, and the units may or may not have been taken. Treat it as an
	// error that needs a look, not as a failure.
	OutcomeUnknown = "outcome_unknown"
)

// A DeductResult is what an Observer learns when a deduction ends.
type DeductResult struct {
	// Strategy is the strategy that decided the outcome: never Auto (under
	// Auto it is Locked, Optimistic, or Atomic for the last write of an
	// optimistic fallback that lost its races).
	Strategy Strategy
	// Fallback is true when Auto did not decide on the lock: the lock
	// service was failing (or its breaker open), contended, or its fence
	// was rejected, and the deduction went optimistic.
	Fallback bool
	// Retries counts the optimistic attempts that lost to a concurrent
	// writer (a moved version, or a transaction the database aborted);
	// zero when no optimistic attempt was made.
	Retries int
	// Items is the number of SKUs in the call (1 for Deduct).
	Items int
	// Err is the call's error, nil when the units were committed.
	Err error
}

// Outcome names the result: OutcomeDeducted, OutcomeInsufficient,
// OutcomeUnknownSKU, OutcomeBusy, OutcomeUnknown or OutcomeFailed.
func (r DeductResult) Outcome() string {
	switch {
	case r.Err == nil:
		return OutcomeDeducted
	case errors.Is(r.Err, ErrOutcomeUnknown):
		return OutcomeUnknown
	case errors.Is(r.Err, ErrInsufficientStock):
		return OutcomeInsufficient
	case errors.Is(r.Err, ErrUnknownSKU):
		return OutcomeUnknownSKU
	case errors.Is(r.Err, ErrBusy):
		return OutcomeBusy
	}
	return OutcomeFailed
}

// WithObserver reports every deduction to o. The default (and a nil o) is
// no observer.
func WithObserver(o Observer) Option {
	return option(func(cfg *config) { cfg.observer = o; cfg.set |= optOther })
}

// run is what one deduction learns on its way, for its Observer.
type run struct {
	retries  int
	fallback bool
}
