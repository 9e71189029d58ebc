package dbguard

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"math/rand/v2"
	"time"
)

// querier is what a statement runs on: *sql.DB, *sql.Tx or *sql.Conn.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Backoff between attempts: full jitter over an exponentially growing
// window, from minBackoff up to maxBackoff.
const (
	minBackoff = 200 * time.Microsecond
	maxBackoff = 20 * time.Millisecond
	// cleanupTimeout bounds a ROLLBACK or a lock release that runs after
	// the caller's context ended.
	cleanupTimeout = 2 * time.Second
)

// backoff is the sleep before attempt+1 (attempt counts from 0).
func backoff(attempt int) time.Duration {
	window := maxBackoff
	if attempt < 8 {
		window = min(minBackoff<<attempt, maxBackoff)
	}
	return window/2 + rand.N(window/2+1)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// retry runs op until it succeeds, fails with an error the database did
// not abort as a whole, or WithRetryBudget attempts are used up.
func (g *Guard) retry(ctx context.Context, op func() error) error {
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || !retryable(g.dialect, err) || attempt+1 >= g.cfg.retries {
			return err
		}
		g.stats.txRetries.Add(1)
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			return err
		}
	}
}

// inTx runs fn in one transaction, committed if fn returns nil and rolled
// back otherwise, and runs it again when the database aborted it
// (deadlock, serialization failure, busy).
func (g *Guard) inTx(ctx context.Context, fn func(q querier) error) error {
	return g.retry(ctx, func() error { return g.txOnce(ctx, fn) })
}

// txOnce runs fn in one transaction. A COMMIT whose answer was lost
// returns ErrOutcomeUnknown (see mayHaveCommitted). On SQLite the
// transaction is BEGIN IMMEDIATE on a dedicated connection: it takes the
// write lock up front, so it never fails half-way because another writer
// went first.
func (g *Guard) txOnce(ctx context.Context, fn func(q querier) error) error {
	if g.dialect == SQLite {
		return g.immediateTx(ctx, fn)
	}
	g.stmts.prepareAll(ctx, g.db, g.q.selQty, g.q.selDiag, g.q.selLocked, g.q.updAtomic, g.q.updFenced, g.q.updVersion)
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	live := ctx.Err() == nil
	return commitError(live, tx.Commit())
}

func (g *Guard) immediateTx(ctx context.Context, fn func(q querier) error) error {
	conn, err := g.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err := fn(conn); err != nil {
		rollback(ctx, conn)
		return err
	}
	live := ctx.Err() == nil
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		rollback(ctx, conn)
		return commitError(live, err)
	}
	return nil
}

// rollback ends conn's transaction even if ctx has ended. If that fails,
// the connection is discarded rather than handed back mid-transaction.
func rollback(ctx context.Context, conn *sql.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := conn.ExecContext(rctx, "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
