package dbguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// errVersionMoved ends an optimistic attempt whose write found the version
// changed; the attempt is then retried.
var errVersionMoved = errors.New("dbguard: version moved")

// deductOptimistic is Tair's versioned put on SQL: read qty and version,
// then write "SET qty = qty - n, version = version + 1 WHERE version = v
// AND qty >= n". A write that finds the version moved changed nothing and
// is retried after a jittered backoff, at most WithRetryBudget attempts in
// all; then ErrBusy (matching ErrVersionConflict too). Nothing is locked
// between the read and the write, and an order of several SKUs writes them
// in one transaction, in sorted order. Lost attempts are counted in
// r.retries.
func (g *Guard) deductOptimistic(ctx context.Context, items []item, r *run) error {
	vers := make([]int64, len(items))
	for attempt := 0; ; attempt++ {
		if err := g.readVersions(ctx, items, vers); err != nil {
			return err
		}
		err := g.writeVersions(ctx, items, vers)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errVersionMoved) && !retryable(g.dialect, err) {
			return err
		}
		g.stats.conflicts.Add(1)
		r.retries++
		if attempt+1 >= g.cfg.retries {
			return fmt.Errorf("%w: %q: %d optimistic attempts lost to concurrent writers: %w",
				ErrBusy, items[0].sku, attempt+1, ErrVersionConflict)
		}
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			return fmt.Errorf("dbguard: deduct %q: %w", items[0].sku, serr)
		}
	}
}

// readVersions reads every item's version into vers, and refuses an
// unknown SKU or one with too few units.
func (g *Guard) readVersions(ctx context.Context, items []item, vers []int64) error {
	for i, it := range items {
		var have int64
		err := g.queryRow(ctx, g.db, g.q.selQtyVer, it.sku).Scan(&have, &vers[i])
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownSKU, it.sku)
		}
		if err != nil {
			return fmt.Errorf("dbguard: read %q: %w", it.sku, err)
		}
		if have < it.qty {
			return insufficient(it, have)
		}
	}
	return nil
}

// writeVersions writes every item if its version is still vers[i], or
// none; errVersionMoved if one had moved.
func (g *Guard) writeVersions(ctx context.Context, items []item, vers []int64) error {
	write := func(q querier) error {
		for i, it := range items {
			live := ctx.Err() == nil
			n, err := g.exec(ctx, q, g.q.updVersion, it.qty, it.sku, vers[i], it.qty)
			if err != nil {
				return deductError(q, live, it.sku, err)
			}
			if n != 1 {
				return errVersionMoved
			}
		}
		return nil
	}
	if len(items) == 1 {
		return write(g.db)
	}
	return g.txOnce(ctx, write)
}
