package dbguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
)

var allStrategies = []dbguard.Strategy{dbguard.Atomic, dbguard.RowLock, dbguard.Optimistic, dbguard.Locked, dbguard.Auto}

// strategyOpts returns the options of a Guard using s, with a locker when
// s needs one.
func strategyOpts(t testing.TB, s dbguard.Strategy) []dbguard.Option {
	opts := []dbguard.Option{dbguard.WithStrategy(s)}
	if s == dbguard.Locked || s == dbguard.Auto {
		opts = append(opts, dbguard.WithLocks(testLocker(t)))
	}
	return opts
}

func TestBadInput(t *testing.T) {
	db := openSQLite(t)
	g, _ := newGuard(t, db, map[string]int64{"a": 5})
	ctx := ctxFor(t, 10*time.Second)
	long := strings.Repeat("x", dbguard.MaxSKULen+1)
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"deduct empty sku", func() error { return g.Deduct(ctx, "", 1) }, dbguard.ErrInvalidSKU},
		{"deduct long sku", func() error { return g.Deduct(ctx, long, 1) }, dbguard.ErrInvalidSKU},
		{"deduct invalid utf-8", func() error { return g.Deduct(ctx, "a\xff", 1) }, dbguard.ErrInvalidSKU},
		{"deduct NUL", func() error { return g.Deduct(ctx, "a\x00b", 1) }, dbguard.ErrInvalidSKU},
		{"deduct newline", func() error { return g.Deduct(ctx, "a\nb", 1) }, dbguard.ErrInvalidSKU},
		{"deduct zero", func() error { return g.Deduct(ctx, "a", 0) }, dbguard.ErrInvalidQty},
		{"deduct negative", func() error { return g.Deduct(ctx, "a", -1) }, dbguard.ErrInvalidQty},
		{"deduct unknown", func() error { return g.Deduct(ctx, "nope", 1) }, dbguard.ErrUnknownSKU},
		{"deduct too many", func() error { return g.Deduct(ctx, "a", 6) }, dbguard.ErrInsufficientStock},
		{"many empty order", func() error { return g.DeductMany(ctx, nil) }, dbguard.ErrInvalidQty},
		{"many bad qty", func() error { return g.DeductMany(ctx, map[string]int64{"a": 1, "b": 0}) }, dbguard.ErrInvalidQty},
		{"many bad sku", func() error { return g.DeductMany(ctx, map[string]int64{"": 1}) }, dbguard.ErrInvalidSKU},
		{"many unknown", func() error { return g.DeductMany(ctx, map[string]int64{"a": 1, "nope": 1}) }, dbguard.ErrUnknownSKU},
		{"restock zero", func() error { return g.Restock(ctx, "a", 0) }, dbguard.ErrInvalidQty},
		{"restock empty sku", func() error { return g.Restock(ctx, "", 1) }, dbguard.ErrInvalidSKU},
		{"stock empty sku", func() error { _, err := g.Stock(ctx, ""); return err }, dbguard.ErrInvalidSKU},
		{"stock unknown", func() error { _, err := g.Stock(ctx, "nope"); return err }, dbguard.ErrUnknownSKU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if n := mustStock(t, g, "a"); n != 5 {
		t.Fatalf("bad input changed the stock: %d", n)
	}
}

// TestBadGuard: New refuses what cannot work, saying why.
func TestBadGuard(t *testing.T) {
	db := openSQLite(t)
	unknown := sql.OpenDB(fakeConnector{})
	t.Cleanup(func() { unknown.Close() })
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"nil db", errOf(dbguard.New(nil)), dbguard.ErrNilDB},
		{"bad table", errOf(dbguard.New(db, dbguard.WithTable("drop table;"))), dbguard.ErrInvalidOption},
		{"schema too deep", errOf(dbguard.New(db, dbguard.WithTable("a.b.c"))), dbguard.ErrInvalidOption},
		{"bad column", errOf(dbguard.New(db, dbguard.WithColumns(dbguard.Columns{Qty: "1qty"}))), dbguard.ErrInvalidOption},
		{"bad strategy", errOf(dbguard.New(db, dbguard.WithStrategy(dbguard.Strategy(42)))), dbguard.ErrInvalidOption},
		{"bad dialect", errOf(dbguard.New(db, dbguard.WithDialect(dbguard.Dialect(42)))), dbguard.ErrInvalidOption},
		{"locked without locker", errOf(dbguard.New(db, dbguard.WithStrategy(dbguard.Locked))), dbguard.ErrInvalidOption},
		{"zero lock timeout", errOf(dbguard.New(db, dbguard.WithWaitTimeout(0))), dbguard.ErrInvalidOption},
		{"zero probe interval", errOf(dbguard.New(db, dbguard.WithProbeInterval(0))), dbguard.ErrInvalidOption},
		{"zero retries", errOf(dbguard.New(db, dbguard.WithRetryBudget(-1))), dbguard.ErrInvalidOption},
		{"unknown driver", errOf(dbguard.New(unknown)), dbguard.ErrInvalidOption},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: New error %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

func TestDialectDetected(t *testing.T) {
	for _, tc := range []struct {
		d    database
		want dbguard.Dialect
	}{
		{databases[0], dbguard.SQLite},
		{databases[1], dbguard.Postgres},
		{databases[2], dbguard.MySQL},
	} {
		t.Run(tc.d.name, func(t *testing.T) {
			g := mustNew(dbguard.New(tc.d.open(t)))
			if got := g.Dialect(); got != tc.want {
				t.Fatalf("detected %v, want %v", got, tc.want)
			}
			if got := g.Strategy(); got != dbguard.Atomic {
				t.Fatalf("default strategy without a locker: %v, want Atomic", got)
			}
		})
	}
}

func TestDefaultStrategy(t *testing.T) {
	db := openSQLite(t)
	if s := mustNew(dbguard.New(db, dbguard.WithLocks(mustNew(core.NewMemory())))).Strategy(); s != dbguard.Auto {
		t.Fatalf("with a locker: %v, want Auto", s)
	}
	if s := mustNew(dbguard.New(db, dbguard.WithStrategy(dbguard.Auto))).Strategy(); s != dbguard.Atomic {
		t.Fatalf("Auto without a locker: %v, want Atomic", s)
	}
}

// Every strategy on every database: exact deductions, refusals that change
// nothing, restock that creates and adds, migration that can run twice,
// custom table and column names.
func TestStrategiesBasics(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		for _, s := range allStrategies {
			t.Run(s.String(), func(t *testing.T) {
				cols := dbguard.Columns{SKU: "item_code", Qty: "on_hand", Version: "rev", Fence: "lock_fence"}
				g, _ := newGuard(t, db, nil, append(strategyOpts(t, s), dbguard.WithColumns(cols))...)
				ctx := ctxFor(t, 30*time.Second)
				if err := g.Migrate(ctx); err != nil {
					t.Fatalf("second Migrate: %v", err)
				}
				if !strings.Contains(g.DDL(), "on_hand") {
					t.Fatalf("DDL ignores the column names: %s", g.DDL())
				}
				must(t, g.Restock(ctx, "a", 3))
				must(t, g.Restock(ctx, "a", 2))
				must(t, g.Restock(ctx, "b", 1))
				must(t, g.Deduct(ctx, "a", 4))
				if err := g.Deduct(ctx, "a", 2); !errors.Is(err, dbguard.ErrInsufficientStock) {
					t.Fatalf("deduct 2 of 1: %v", err)
				}
				if err := g.Deduct(ctx, "zz", 1); !errors.Is(err, dbguard.ErrUnknownSKU) {
					t.Fatalf("deduct unknown: %v", err)
				}
				// All or nothing: b is short, so a keeps its unit.
				if err := g.DeductMany(ctx, map[string]int64{"a": 1, "b": 2}); !errors.Is(err, dbguard.ErrInsufficientStock) {
					t.Fatalf("short order: %v", err)
				}
				if err := g.DeductMany(ctx, map[string]int64{"a": 1, "zz": 1}); !errors.Is(err, dbguard.ErrUnknownSKU) {
					t.Fatalf("order with an unknown SKU: %v", err)
				}
				if a, b := mustStock(t, g, "a"), mustStock(t, g, "b"); a != 1 || b != 1 {
					t.Fatalf("after refused orders: a=%d b=%d, want 1 1", a, b)
				}
				must(t, g.DeductMany(ctx, map[string]int64{"a": 1, "b": 1}))
				if a, b := mustStock(t, g, "a"), mustStock(t, g, "b"); a != 0 || b != 0 {
					t.Fatalf("after the order: a=%d b=%d, want 0 0", a, b)
				}
				st := g.Stats()
				if st.Deductions != 2 || st.Units != 6 || st.Insufficient != 2 || st.Unknown != 2 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	})
}

// A context that ends makes a deduction return its error, with nothing
// deducted.
func TestCancelledContext(t *testing.T) {
	db := openSQLite(t)
	for _, s := range allStrategies {
		t.Run(s.String(), func(t *testing.T) {
			g, _ := newGuard(t, db, map[string]int64{"a": 1}, strategyOpts(t, s)...)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			// Nothing was sent: an ordinary failure, not ErrOutcomeUnknown.
			if err := g.Deduct(ctx, "a", 1); !errors.Is(err, context.Canceled) || errors.Is(err, dbguard.ErrOutcomeUnknown) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if n := mustStock(t, g, "a"); n != 1 {
				t.Fatalf("stock %d after a cancelled deduction", n)
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The package's contention and outage errors speak core's vocabulary.
func TestErrorsMatchCore(t *testing.T) {
	if !errors.Is(fmt.Errorf("deduct: %w", dbguard.ErrBusy), core.ErrNotAcquired) {
		t.Error("ErrBusy does not match core.ErrNotAcquired")
	}
	if !errors.Is(fmt.Errorf("deduct: %w", dbguard.ErrUnavailable), core.ErrUnavailable) {
		t.Error("ErrUnavailable does not match core.ErrUnavailable")
	}
	if errors.Is(dbguard.ErrBusy, core.ErrUnavailable) || errors.Is(dbguard.ErrUnavailable, core.ErrNotAcquired) {
		t.Error("contention and outage mixed up")
	}
}

// errOf returns a constructor's error.
func errOf[T any](_ T, err error) error { return err }
