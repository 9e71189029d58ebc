package otel_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	_ "modernc.org/sqlite"
)

var (
	strategyKey = attribute.Key("latchkey.stock.strategy")
	fallbackKey = attribute.Key("latchkey.stock.fallback")
	retriesKey  = attribute.Key("latchkey.stock.retries")
)

// stockDB opens a SQLite database in t.TempDir() with the Guard's table,
// and a control table: while its n is above zero, every UPDATE of a stock
// row is ignored (and n counts down), so the next optimistic write finds
// "the version moved" — a lost race, on demand.
func stockDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "stock.db")+"?_pragma=busy_timeout(20000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := mustNew(dbguard.New(db)).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE race (n INTEGER NOT NULL)`,
		`INSERT INTO race VALUES (0)`,
		`CREATE TRIGGER race BEFORE UPDATE ON dbguard_stock WHEN (SELECT n FROM race) > 0
		 BEGIN UPDATE race SET n = n - 1; SELECT RAISE(IGNORE); END`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// loseRaces makes the next n updates of stock rows change nothing.
func loseRaces(t testing.TB, db *sql.DB, n int) {
	t.Helper()
	if _, err := db.Exec(`UPDATE race SET n = ?`, n); err != nil {
		t.Fatal(err)
	}
}

// restock puts qty units of each sku in stock.
func restock(t testing.TB, g *dbguard.Guard, qty int64, skus ...string) {
	t.Helper()
	for _, sku := range skus {
		if err := g.Restock(context.Background(), sku, qty); err != nil {
			t.Fatal(err)
		}
	}
}

// deadLocker is a core.Client whose Redis is gone.
func deadLocker(t testing.TB) *core.Client {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	mr.Close()
	c := mustNew(core.NewRedis(rdb))
	t.Cleanup(func() { c.Close(); rdb.Close() })
	return c
}

// TestStockDeduct: each deduction is one latchkey.stock.deduct span under
// the caller's span, with the strategy that decided, the fallback, the
// lost races and the outcome; refusals are outcomes (status Unset), a
// database failure is an error with the same error.type on span and
// metric; the lock calls nest under the deduction; no SKU is recorded.
func TestStockDeduct(t *testing.T) {
	tel := newTelemetry(t)
	db := stockDB(t)
	locker, _, _ := redisClient(t, tel.inst)
	auto := mustNew(dbguard.New(db, dbguard.WithLocks(locker), dbguard.WithObserver(tel.inst)))
	optimistic := mustNew(dbguard.New(db, dbguard.WithStrategy(dbguard.Optimistic), dbguard.WithObserver(tel.inst)))
	fallback := mustNew(dbguard.New(db, dbguard.WithLocks(deadLocker(t)), dbguard.WithObserver(tel.inst)))
	closedDB := stockDB(t)
	closedDB.Close()
	broken := mustNew(dbguard.New(closedDB, dbguard.WithDialect(dbguard.SQLite), dbguard.WithStrategy(dbguard.Atomic), dbguard.WithObserver(tel.inst)))
	restock(t, auto, 5, "sku-secret-1", "sku-secret-2")

	tests := []struct {
		name     string
		deduct   func(ctx context.Context) error
		races    int
		op       string
		strategy string
		fallback bool
		retries  int
		outcome  string
		errType  string
	}{
		{"locked", func(ctx context.Context) error { return auto.Deduct(ctx, "sku-secret-1", 1) },
			0, "deduct", "locked", false, 0, "deducted", ""},
		{"many", func(ctx context.Context) error {
			return auto.DeductMany(ctx, map[string]int64{"sku-secret-1": 1, "sku-secret-2": 1})
		}, 0, "deduct_many", "locked", false, 0, "deducted", ""},
		{"insufficient", func(ctx context.Context) error { return auto.Deduct(ctx, "sku-secret-1", 99) },
			0, "deduct", "locked", false, 0, "insufficient", ""},
		{"unknown", func(ctx context.Context) error { return auto.Deduct(ctx, "sku-secret-none", 1) },
			0, "deduct", "locked", false, 0, "unknown_sku", ""},
		{"lost races", func(ctx context.Context) error { return optimistic.Deduct(ctx, "sku-secret-2", 1) },
			2, "deduct", "optimistic", false, 2, "deducted", ""},
		{"fallback", func(ctx context.Context) error { return fallback.Deduct(ctx, "sku-secret-2", 1) },
			1, "deduct", "optimistic", true, 1, "deducted", ""},
		{"database down", func(ctx context.Context) error { return broken.Deduct(ctx, "sku-secret-2", 1) },
			0, "deduct", "atomic", false, 0, "failed", "database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loseRaces(t, db, tt.races)
			ctx, req := tel.tp.Tracer("test").Start(context.Background(), "request")
			err := tt.deduct(ctx)
			req.End()
			if (err == nil) != (tt.outcome == "deducted") {
				t.Fatalf("err %v, want outcome %s", err, tt.outcome)
			}
			s := tel.childOf(t, req.SpanContext(), "latchkey.stock.deduct")
			status := codes.Unset
			want := []attribute.KeyValue{op.String(tt.op), strategyKey.String(tt.strategy), fallbackKey.Bool(tt.fallback),
				retriesKey.Int(tt.retries), outcome.String(tt.outcome)}
			if tt.errType != "" {
				status = codes.Error
				want = append(want, errType.String(tt.errType))
			}
			checkSpan(t, s, req.SpanContext(), status, want...)
			for _, kv := range s.Attributes() {
				if strings.Contains(kv.Value.String(), "sku-secret") {
					t.Errorf("the SKU is recorded: %s", kv.Key)
				}
			}
			if tt.strategy == "locked" && tt.outcome == "deducted" && tt.op == "deduct" {
				tel.childOf(t, s.SpanContext(), "latchkey.acquire")
			}
		})
	}

	deductions := func(strategy, oc string, kv ...attribute.KeyValue) float64 {
		return tel.value(t, "latchkey.stock.deductions", append(kv, strategyKey.String(strategy), outcome.String(oc))...)
	}
	for _, c := range []struct {
		strategy, outcome string
		want              float64
	}{
		{"locked", "deducted", 2}, {"locked", "insufficient", 1}, {"locked", "unknown_sku", 1},
		{"optimistic", "deducted", 2}, {"atomic", "failed", 1},
	} {
		if got := deductions(c.strategy, c.outcome); got != c.want {
			t.Errorf("deductions %s %s = %v, want %v", c.strategy, c.outcome, got, c.want)
		}
	}
	if got := deductions("atomic", "failed", errType.String("database")); got != 1 {
		t.Errorf("failed deductions with error.type database = %v", got)
	}
	if got := tel.value(t, "latchkey.stock.optimistic.retries", strategyKey.String("optimistic")); got != 3 {
		t.Errorf("optimistic retries %v, want 3", got)
	}
}

// TestStockErrorTypes: how deduction failures are named.
func TestStockErrorTypes(t *testing.T) {
	tel := newTelemetry(t)
	tests := []struct {
		err     error
		outcome string
		errType string
	}{
		{nil, "deducted", ""},
		{dbguard.ErrInsufficientStock, "insufficient", ""},
		{dbguard.ErrUnknownSKU, "unknown_sku", ""},
		{errors.Join(dbguard.ErrBusy, dbguard.ErrVersionConflict), "busy", ""},
		{errors.Join(dbguard.ErrUnavailable, errors.New("dial tcp: refused")), "failed", "lock_unavailable"},
		{dbguard.ErrStaleFence, "failed", "stale_fence"},
		{context.DeadlineExceeded, "failed", "timeout"},
		{context.Canceled, "failed", "canceled"},
		{errors.New("driver: bad connection"), "failed", "database"},
	}
	for _, tt := range tests {
		_, end := tel.inst.DeductStart(context.Background(), dbguard.OpDeduct, dbguard.Atomic)
		end(dbguard.DeductResult{Strategy: dbguard.Atomic, Items: 1, Err: tt.err})
		spans := tel.sr.Ended()
		s := spans[len(spans)-1]
		a := attrs(s)
		if a[outcome].AsString() != tt.outcome || a[errType].AsString() != tt.errType ||
			(s.Status().Code == codes.Error) != (tt.errType != "") {
			t.Errorf("%v: outcome %q error.type %q status %v, want %q %q",
				tt.err, a[outcome].AsString(), a[errType].AsString(), s.Status().Code, tt.outcome, tt.errType)
		}
		if len(s.Events()) != 0 {
			t.Errorf("%v: events %v", tt.err, s.Events())
		}
	}
}
