package dbguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// deductAtomic: one conditional UPDATE per SKU, WHERE qty >= n. The
// database re-checks the condition on the row it locks (PostgreSQL's Read
// Committed re-evaluates it on the latest version, InnoDB reads it with a
// locking read, SQLite has one writer), so two buyers can never both take
// the last unit. An order of several SKUs runs in one transaction, in
// sorted order.
func (g *Guard) deductAtomic(ctx context.Context, items []item) error {
	if len(items) == 1 {
		it := items[0]
		var (
			n    int64
			live bool
		)
		err := g.retry(ctx, func() error {
			var err error
			live = ctx.Err() == nil
			n, err = g.exec(ctx, g.db, g.q.updAtomic, it.qty, it.sku, it.qty)
			return err
		})
		if err != nil {
			return deductError(g.db, live, it.sku, err)
		}
		if n == 1 {
			return nil
		}
		return g.refusal(ctx, g.db, it)
	}
	return g.inTx(ctx, func(q querier) error {
		for _, it := range items {
			n, err := g.exec(ctx, q, g.q.updAtomic, it.qty, it.sku, it.qty)
			if err != nil {
				return fmt.Errorf("dbguard: deduct %q: %w", it.sku, err)
			}
			if n != 1 {
				return g.refusal(ctx, q, it)
			}
		}
		return nil
	})
}

// deductRowLock: in one transaction, lock every row in sorted order with
// SELECT ... FOR UPDATE (on SQLite, BEGIN IMMEDIATE has locked the whole
// database), check the quantities, then update them.
func (g *Guard) deductRowLock(ctx context.Context, items []item) error {
	return g.inTx(ctx, func(q querier) error {
		for _, it := range items {
			var have int64
			err := g.queryRow(ctx, q, g.q.selLocked, it.sku).Scan(&have)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: %q", ErrUnknownSKU, it.sku)
			}
			if err != nil {
				return fmt.Errorf("dbguard: lock row %q: %w", it.sku, err)
			}
			if have < it.qty {
				return insufficient(it, have)
			}
		}
		for _, it := range items {
			n, err := g.exec(ctx, q, g.q.updAtomic, it.qty, it.sku, it.qty)
			if err != nil {
				return fmt.Errorf("dbguard: deduct %q: %w", it.sku, err)
			}
			if n != 1 { // cannot happen while the row is locked; never write blindly
				return g.refusal(ctx, q, it)
			}
		}
		return nil
	})
}

// refusal explains why a conditional UPDATE of it changed no row: the SKU
// is unknown, or it had too few units.
func (g *Guard) refusal(ctx context.Context, q querier, it item) error {
	var have int64
	err := g.queryRow(ctx, q, g.q.selQty, it.sku).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %q", ErrUnknownSKU, it.sku)
	}
	if err != nil {
		return fmt.Errorf("dbguard: deduct %q: %w", it.sku, err)
	}
	return insufficient(it, have)
}

func insufficient(it item, have int64) error {
	return fmt.Errorf("%w: %q: want %d, have %d", ErrInsufficientStock, it.sku, it.qty, have)
}
