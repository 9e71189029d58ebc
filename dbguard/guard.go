package dbguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"

	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/sqldialect"
)

// A Guard deducts stock from one table of one database so that no unit is
// ever sold twice, with the strategy it was given. It is safe for
// concurrent use by any number of goroutines, and several Guards —
// in several processes — may share a table, each with its own strategy.
type Guard struct {
	db      *sql.DB
	cfg     config
	dialect Dialect
	q       queries

	breaker breaker
	waiting waitlist
	stmts   stmtCache
	stats   counters

	// beforeFencedWrite, if set (by tests), runs after a Locked deduction
	// holds its locks and before its fenced write.
	beforeFencedWrite func(ctx context.Context, sku string, fence int64)
}

// New returns a Guard on db's stock table (DefaultTable unless WithTable
// says otherwise). It does no I/O: create the table with Migrate, or with
// the DDL of the package documentation. The error is ErrNilDB for a nil
// db, or ErrInvalidOption saying which option is wrong (or that the SQL
// dialect cannot be told: use WithDialect).
func New(db *sql.DB, opts ...Option) (*Guard, error) {
	g := &Guard{db: db, cfg: defaultConfig(DefaultTable)}
	for _, o := range opts {
		if o != nil {
			o.apply(&g.cfg)
		}
	}
	g.breaker.interval = g.cfg.probeInterval
	switch {
	case db == nil:
		return nil, ErrNilDB
	case g.cfg.err != nil:
		return nil, g.cfg.err
	case g.cfg.strategy == Locked && g.cfg.locker == nil:
		return nil, fmt.Errorf("%w: strategy Locked needs WithLocks", ErrInvalidOption)
	}
	g.dialect = g.cfg.dialect
	if g.dialect == DetectDialect {
		g.dialect = sqldialect.Of(db)
		if g.dialect == DetectDialect {
			return nil, fmt.Errorf("%w: cannot tell the SQL dialect of driver %T: use WithDialect", ErrInvalidOption, db.Driver())
		}
	}
	g.q = buildQueries(g.dialect, g.cfg.table, g.cfg.cols)
	return g, nil
}

// Strategy returns the strategy deductions use: the one given with
// WithStrategy, except that Auto without a locker is Atomic.
func (g *Guard) Strategy() Strategy {
	if g.cfg.strategy == Auto && g.cfg.locker == nil {
		return Atomic
	}
	return g.cfg.strategy
}

// Dialect returns the SQL dialect in use (detected, or given with
// WithDialect); DetectDialect if it could not be detected.
func (g *Guard) Dialect() Dialect { return g.dialect }

// DDL returns the CREATE TABLE IF NOT EXISTS statement of the Guard's
// table, in its dialect and with its names: Migrate runs exactly this. Put
// it in your own migrations if you prefer.
func (g *Guard) DDL() string {
	return g.q.ddl
}

// Migrate creates the Guard's table if it does not exist yet. It never
// alters an existing table; on MySQL and MariaDB it checks that the SKU
// column of an existing one compares byte for byte, and returns
// ErrIncompatibleTable, with the ALTER TABLE statement that fixes it, if
// not (see the package documentation, "The table").
func (g *Guard) Migrate(ctx context.Context) error {
	if _, err := g.db.ExecContext(ctx, g.q.ddl); err != nil {
		return fmt.Errorf("dbguard: migrate %s: %w", g.cfg.table, err)
	}
	return checkKeyColumn(ctx, g.db, g.dialect, g.cfg.table, g.cfg.cols.SKU)
}

// Stock returns the units of sku in stock, or ErrUnknownSKU.
func (g *Guard) Stock(ctx context.Context, sku string) (int64, error) {
	if err := validSKU(sku); err != nil {
		return 0, err
	}
	var qty int64
	err := g.queryRow(ctx, g.db, g.q.selQty, sku).Scan(&qty)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", ErrUnknownSKU, sku)
	}
	if err != nil {
		return 0, fmt.Errorf("dbguard: stock %q: %w", sku, err)
	}
	return qty, nil
}

// Restock adds qty units to sku, creating its row if it is new. It is one
// atomic statement, safe beside concurrent deductions of any strategy, and
// bumps the row's version (so optimistic deductions in flight re-read).
// A qty of zero or less is ErrInvalidQty; one that would take the stock
// past math.MaxInt64 units adds nothing and returns ErrQtyOverflow (which
// matches ErrInvalidQty too), on every dialect.
func (g *Guard) Restock(ctx context.Context, sku string, qty int64) error {
	if err := validSKU(sku); err != nil {
		return err
	}
	if qty <= 0 {
		return fmt.Errorf("%w: restock %q by %d", ErrInvalidQty, sku, qty)
	}
	args := []any{sku, qty}
	if g.dialect == MySQL {
		args = append(args, qty)
	}
	var changed int64
	err := g.retry(ctx, func() error {
		var err error
		changed, err = g.exec(ctx, g.db, g.q.restock, args...)
		return err
	})
	switch {
	case g.dialect == MySQL && mysqlNumber(err) == 1690, // ER_DATA_OUT_OF_RANGE: qty + n
		err == nil && changed == 0 && g.dialect != MySQL: // the upsert's WHERE refused the sum
		return fmt.Errorf("%w: restock %q by %d", ErrQtyOverflow, sku, qty)
	case err != nil:
		return fmt.Errorf("dbguard: restock %q: %w", sku, err)
	}
	return nil
}

// Deduct takes qty units of sku, or nothing: it returns
// ErrInsufficientStock when fewer are left, ErrUnknownSKU when sku has no
// row, ErrInvalidSKU or ErrInvalidQty for bad input, ErrBusy when
// contention outlasted the configured bounds, ErrOutcomeUnknown when the
// answer to its write was lost and could not be settled (the units may or
// may not have been taken), and a database (or, under Locked,
// ErrUnavailable) error as itself. After a nil error the units are
// committed; after any error but ErrOutcomeUnknown, none were.
func (g *Guard) Deduct(ctx context.Context, sku string, qty int64) error {
	if err := validSKU(sku); err != nil {
		return err
	}
	if qty <= 0 {
		return fmt.Errorf("%w: deduct %d of %q", ErrInvalidQty, qty, sku)
	}
	return g.deduct(ctx, OpDeduct, []item{{sku: sku, qty: qty}})
}

// DeductMany takes every line of an order (SKU → units) in one
// transaction, or nothing: if any SKU is unknown or short, no SKU is
// deducted and the error names the first such SKU in sorted order. SKUs
// are locked and written in sorted order, so two orders touching the same
// SKUs in different orders never deadlock. Errors are those of Deduct.
func (g *Guard) DeductMany(ctx context.Context, order map[string]int64) error {
	if len(order) == 0 {
		return fmt.Errorf("%w: empty order", ErrInvalidQty)
	}
	items := make([]item, 0, len(order))
	for sku, qty := range order {
		if err := validSKU(sku); err != nil {
			return err
		}
		if qty <= 0 {
			return fmt.Errorf("%w: deduct %d of %q", ErrInvalidQty, qty, sku)
		}
		items = append(items, item{sku: sku, qty: qty})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].sku < items[j].sku })
	return g.deduct(ctx, OpDeductMany, items)
}

// An item is one line of an order.
type item struct {
	sku string
	qty int64
}

// deduct runs the strategy on items, sorted by SKU, counts the outcome
// and reports it to the Observer.
func (g *Guard) deduct(ctx context.Context, op string, items []item) error {
	var (
		err error
		via Strategy
		r   run
		end func(DeductResult)
	)
	strategy := g.Strategy()
	if o := g.cfg.observer; o != nil {
		var octx context.Context
		if octx, end = o.DeductStart(ctx, op, strategy); octx != nil {
			ctx = octx
		}
	}
	switch strategy {
	case Atomic:
		via, err = Atomic, g.deductAtomic(ctx, items)
	case RowLock:
		via, err = RowLock, g.deductRowLock(ctx, items)
	case Optimistic:
		via, err = Optimistic, g.deductOptimistic(ctx, items, &r)
	case Locked:
		via, err = Locked, g.deductLocked(ctx, items, false)
	default: // Auto with a locker
		via, err = g.deductAuto(ctx, items, &r)
	}
	g.stats.record(via, items, err)
	if end != nil {
		end(DeductResult{Strategy: via, Fallback: r.fallback, Retries: r.retries, Items: len(items), Err: err})
	}
	return err
}

// validSKU checks a SKU (or a Versioned key, with sentinel bad).
func validSKU(sku string) error { return validName(sku, ErrInvalidSKU, "sku") }

func validName(s string, bad error, what string) error {
	if why := name.Check(s, MaxSKULen); why != "" {
		return fmt.Errorf("%w: %s %q: %s", bad, what, s, why)
	}
	return nil
}

// lockKey is the core lock key of sku.
func (g *Guard) lockKey(sku string) string {
	return "dbguard:" + g.cfg.table + ":" + sku
}
