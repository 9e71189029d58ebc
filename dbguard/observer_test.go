package dbguard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu      sync.Mutex
	starts  []string // "op strategy"
	results []dbguard.DeductResult
	ctxSeen []bool // whether the lock calls ran under the observer's context
}

type ctxMark struct{}

func (r *recorder) DeductStart(ctx context.Context, op string, s dbguard.Strategy) (context.Context, func(dbguard.DeductResult)) {
	r.mu.Lock()
	r.starts = append(r.starts, op+" "+s.String())
	r.mu.Unlock()
	return context.WithValue(ctx, ctxMark{}, true), func(res dbguard.DeductResult) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.results = append(r.results, res)
	}
}

// lockSpy is a core.Observer that notes whether acquisitions ran under
// the recorder's context.
type lockSpy struct{ r *recorder }

func (l lockSpy) OpStart(ctx context.Context, op core.Op, key string, _ core.Kind) (context.Context, func(core.OpResult)) {
	if op == core.OpAcquire {
		l.r.mu.Lock()
		l.r.ctxSeen = append(l.r.ctxSeen, ctx.Value(ctxMark{}) != nil)
		l.r.mu.Unlock()
	}
	return ctx, func(core.OpResult) {}
}

func (lockSpy) LeaseLost(context.Context, string, core.Kind, int64, time.Duration, error) {}

// TestObserver: the Observer hears of every deduction that passed its
// input checks, with the op, the strategy that decided, the outcome, and
// the lock calls run under the context it returned; refused input is not
// reported.
func TestObserver(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	rec := &recorder{}
	locks := mustNew(core.NewMemory(core.WithObserver(lockSpy{rec})))
	t.Cleanup(func() { locks.Close() })
	g := mustNew(dbguard.New(db, dbguard.WithLocks(locks), dbguard.WithObserver(rec)))
	if err := g.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Restock(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	_ = g.Deduct(ctx, "a", 1)
	_ = g.DeductMany(ctx, map[string]int64{"a": 5})
	_ = g.Deduct(ctx, "zz", 1)
	_ = g.Deduct(ctx, "a", 0) // invalid: not reported

	wantStarts := []string{"deduct Auto", "deduct_many Auto", "deduct Auto"}
	wantOutcomes := []string{dbguard.OutcomeDeducted, dbguard.OutcomeInsufficient, dbguard.OutcomeUnknownSKU}
	if fmt.Sprint(rec.starts) != fmt.Sprint(wantStarts) {
		t.Errorf("starts %v, want %v", rec.starts, wantStarts)
	}
	for i, res := range rec.results {
		if res.Outcome() != wantOutcomes[i] || res.Strategy != dbguard.Locked || res.Fallback || res.Retries != 0 || res.Items != 1 {
			t.Errorf("result %d: %+v (%s), want %s via Locked", i, res, res.Outcome(), wantOutcomes[i])
		}
	}
	if len(rec.ctxSeen) == 0 || !all(rec.ctxSeen) {
		t.Errorf("acquisitions under the observer's context: %v", rec.ctxSeen)
	}
}

func all(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}

// TestObserverOutcome: how a DeductResult names its outcome.
func TestObserverOutcome(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, "deducted"},
		{fmt.Errorf("x: %w", dbguard.ErrInsufficientStock), "insufficient"},
		{dbguard.ErrUnknownSKU, "unknown_sku"},
		{errors.Join(dbguard.ErrBusy, dbguard.ErrVersionConflict), "busy"},
		{dbguard.ErrUnavailable, "failed"},
		{context.Canceled, "failed"},
		{fmt.Errorf("x: %w", errors.Join(dbguard.ErrOutcomeUnknown, context.Canceled)), "outcome_unknown"},
	} {
		if got := (dbguard.DeductResult{Err: tt.err}).Outcome(); got != tt.want {
			t.Errorf("%v: %s, want %s", tt.err, got, tt.want)
		}
	}
}

// ExampleWithObserver reports each deduction to an Observer (package
// otel's Instrumentation is one; this one prints).
func ExampleWithObserver() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()

	g := mustNew(dbguard.New(db, dbguard.WithObserver(printer{})))
	_ = g.Migrate(ctx)
	_ = g.Restock(ctx, "mug", 1)
	_ = g.Deduct(ctx, "mug", 1)
	_ = g.Deduct(ctx, "mug", 1)
	_ = g.DeductMany(ctx, map[string]int64{"cup": 1})
	// Output:
	// deduct via Atomic: deducted
	// deduct via Atomic: insufficient
	// deduct_many via Atomic: unknown_sku
}

type printer struct{}

func (printer) DeductStart(ctx context.Context, op string, _ dbguard.Strategy) (context.Context, func(dbguard.DeductResult)) {
	return ctx, func(r dbguard.DeductResult) { fmt.Printf("%s via %s: %s\n", op, r.Strategy, r.Outcome()) }
}
