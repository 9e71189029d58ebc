package httpidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

type txKey struct{}

// TxFromContext returns the database transaction of a request that
// Idempotency runs with a SQLStore made WithHandlerTx: the handler makes
// its writes in it, and the middleware stores the response in it and
// commits it — so the writes and the stored response are committed
// together, or not at all. The handler must not commit or roll it back.
// It reports false for any other request: no key, another store, or a
// store failure passed through by FailOpen.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}

// txLease is a Lease whose request runs in a transaction that stores its
// response: a SQLStore's made WithHandlerTx.
type txLease interface {
	Lease
	// beginTx begins the request's transaction; ctx bounds its life.
	beginTx(ctx context.Context) (*sql.Tx, error)
	// completeTx stores rec in tx, commits tx and ends the lease. It rolls
	// tx back, and gives the key up, when it cannot store rec. Its error
	// matches ErrLost when the key was taken over, ErrUnavailable when the
	// database failed; either way nothing was committed, unless it also
	// matches errCommitUnknown.
	completeTx(ctx context.Context, tx *sql.Tx, rec *Record, ttl time.Duration) error
	// abortTx rolls tx back and gives the key up.
	abortTx(ctx context.Context, tx *sql.Tx) error
}

// errCommitUnknown: the connection failed during COMMIT, so the response
// and the handler's writes may or may not be committed; the key stays in
// flight until its lease expires, and then replays or runs again.
var errCommitUnknown = errors.New("the outcome of the commit is unknown: the key stays in flight until its lease expires")

// sqlTxLease is the lease of a SQLStore made WithHandlerTx.
type sqlTxLease struct{ *sqlLease }

var _ txLease = (*sqlTxLease)(nil)

func (l *sqlTxLease) beginTx(ctx context.Context) (*sql.Tx, error) {
	tx, err := l.s.db.BeginTx(ctx, l.s.txOpts)
	if err != nil {
		return nil, storeErr("begin transaction", err)
	}
	return tx, nil
}

func (l *sqlTxLease) abortTx(ctx context.Context, tx *sql.Tx) error {
	rbErr := tx.Rollback()
	if errors.Is(rbErr, sql.ErrTxDone) {
		rbErr = nil // rolled back already: the lease was lost, or the handler ended it
	}
	return errors.Join(rbErr, l.Release(ctx))
}

// completeTx inserts the response row in the handler's transaction — the
// key's lease row is not touched in it, so renewals never conflict with
// it — and commits. The response row's primary key is what makes the
// commit exactly-once: a request that took the key over after this
// lease expired inserts the same row, and only one of the two
// transactions can commit it.
func (l *sqlTxLease) completeTx(ctx context.Context, tx *sql.Tx, rec *Record, ttl time.Duration) error {
	fail := func(err error) error {
		_ = l.abortTx(ctx, tx)
		return err
	}
	if ttl < time.Millisecond {
		return fail(fmt.Errorf("%w: record ttl %v", ErrInvalidArgument, ttl))
	}
	if err := l.Err(); err != nil {
		return fail(err)
	}
	stored, err := l.s.putRecord(ctx, tx, l.key, l.token, rec, ttl)
	switch {
	case errors.Is(err, sql.ErrTxDone):
		return fail(storeErr("store record", fmt.Errorf("the transaction ended before the response was stored"+
			" (a handler must not commit or roll back the transaction of TxFromContext): %w", err)))
	case err != nil:
		return fail(storeErr("store record", err))
	case !stored:
		return fail(fmt.Errorf("%w: %w; the transaction was rolled back", ErrLost, errLaterRecord))
	}
	if err := tx.Commit(); err != nil {
		return l.commitFailed(ctx, err)
	}
	if l.end() {
		// The response is stored and replays; a lease row left behind by
		// a failure here expires with its TTL.
		_ = l.deleteRow(ctx)
	}
	return nil
}

// commitFailed ends the lease after a failed COMMIT. If the database
// refused it, nothing was committed and the key is given up. If the
// connection failed, the commit may have happened: when the response row
// is there with this lease's token it did; otherwise the lease row is
// left to expire, so that no retry runs before the commit's fate is
// settled.
func (l *sqlTxLease) commitFailed(ctx context.Context, err error) error {
	l.end()
	if answeredError(l.s.dialect, err) {
		_ = l.deleteRow(ctx)
		return storeErr("commit", err)
	}
	var n int64
	if qerr := l.s.db.QueryRowContext(ctx, l.s.q.ownRecord, l.key, l.token).Scan(&n); qerr == nil && n > 0 {
		_ = l.deleteRow(ctx)
		return nil
	}
	return storeErr("commit", fmt.Errorf("%w: %w", errCommitUnknown, err))
}
