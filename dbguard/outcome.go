package dbguard

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// unknownOutcome is ErrOutcomeUnknown with its cause: errors.Is finds
// both, and a Locked deduction that settles its outcome takes the cause
// back out.
type unknownOutcome struct {
	what string // "deduct \"sku\"", "commit"
	err  error  // the driver's error
}

func (e *unknownOutcome) Error() string {
	return ErrOutcomeUnknown.Error() + ": " + e.what + ": " + e.err.Error()
}

func (e *unknownOutcome) Unwrap() []error { return []error{ErrOutcomeUnknown, e.err} }

// plain is err without the ErrOutcomeUnknown of e: what a settled
// deduction that did not commit returns.
func (e *unknownOutcome) plain() error { return fmt.Errorf("dbguard: %s: %w", e.what, e.err) }

// deductError wraps the error of the statement that deducts sku on q. On
// the *sql.DB that statement commits by itself (autocommit), so an error
// that may have come after the commit (see mayHaveCommitted) is
// ErrOutcomeUnknown; inside a transaction nothing is committed before
// COMMIT (txOnce judges that one). live is whether ctx was still live
// when the statement was made.
func deductError(q querier, live bool, sku string, err error) error {
	if _, autocommit := q.(*sql.DB); autocommit && mayHaveCommitted(live, err) {
		return &unknownOutcome{what: fmt.Sprintf("deduct %q", sku), err: err}
	}
	return fmt.Errorf("dbguard: deduct %q: %w", sku, err)
}

// commitError wraps the error of a COMMIT, made while ctx was live or not.
func commitError(live bool, err error) error {
	if mayHaveCommitted(live, err) {
		return &unknownOutcome{what: "commit", err: err}
	}
	return err
}

// mayHaveCommitted reports whether err, from a statement that commits (an
// autocommit UPDATE, or COMMIT), leaves open whether it did: the request
// was sent and its answer was lost — the connection was killed, reset or
// closed under it, or the context ended while it was in flight (the
// drivers then close the connection and return the context's error).
//
// It is false for an error from before anything was sent: the context had
// ended already (live false), database/sql's ErrConnDone and ErrTxDone,
// driver.ErrBadConn (by database/sql's contract a driver returns it only
// when the server cannot have run the statement: go-sql-driver/mysql and
// pgx return it for a connection found dead before writing), and pgx's
// errors that say they are safe to retry, a failure to dial. It is false too for an answer
// from the server — an error with a SQLSTATE, a MySQL error number, a
// SQLite result code: the statement failed — except MySQL's 1927
// (ER_CONNECTION_KILLED), sent to a connection killed mid-statement.
func mayHaveCommitted(live bool, err error) bool {
	switch {
	case err == nil, !live,
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone):
		return false
	}
	switch n := mysqlNumber(err); {
	case n == 1927:
		return true
	case n != 0, sqlStateOf(err) != "":
		return false
	}
	if _, ok := sqliteCode(err); ok {
		return false
	}
	var retry interface{ SafeToRetry() bool } // pgx's pgconn errors
	if errors.As(err, &retry) {
		return !retry.SafeToRetry()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" { // a new connection failed to open
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &op) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		hasText(err, "invalid connection") // go-sql-driver/mysql's ErrInvalidConn
}

// hasText reports whether err or an error it wraps reads exactly msg.
func hasText(err error, msg string) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == msg {
			return true
		}
	}
	return false
}

// settleFenced decides a Locked deduction whose fenced write of it (and
// of the rest of its order, in the same transaction) failed with err
// while its lock is still held: the row's fence says whether the write
// committed. It returns nil when it did, the plain failure when it did
// not (and now cannot: a write still in flight on the server would find
// the fence taken), and err — ErrOutcomeUnknown when the answer was lost
// — when the row cannot tell.
func (g *Guard) settleFenced(ctx context.Context, it item, fence int64, err error) error {
	var u *unknownOutcome
	lost := errors.As(err, &u)
	committed, known := g.fenceOutcome(ctx, it.sku, fence)
	switch {
	case !known:
		return err
	case committed:
		g.stats.settled.Add(1)
		return nil
	case lost:
		g.stats.settled.Add(1)
		return u.plain()
	}
	return err
}

// fenceOutcome reads whether the row of sku holds fence — only a write of
// the lock holder with that fence stores it — within cleanupTimeout, even
// if ctx has ended. If the row holds a lower fence, it stores fence
// without deducting ("SET fence = f WHERE fence < f"), so that the
// deduction's write, if the server is still running it, can no longer
// apply; then the deduction did not commit. A higher fence (a later
// holder has written since), or an error, leaves it unknown.
func (g *Guard) fenceOutcome(ctx context.Context, sku string, fence int64) (committed, known bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	read := func() (int64, error) {
		var have, stored int64
		err := g.queryRow(ctx, g.db, g.q.selDiag, sku).Scan(&have, &stored)
		return stored, err
	}
	stored, err := read()
	switch {
	case err != nil || stored > fence:
		return false, false
	case stored == fence:
		return true, true
	}
	var n int64
	err = g.retry(ctx, func() error {
		var err error
		n, err = g.exec(ctx, g.db, g.q.claimFence, fence, sku, fence)
		return err
	})
	switch {
	case err != nil: // the claim itself may have committed: fence f no longer tells
		return false, false
	case n == 1:
		return false, true
	}
	// The deduction's write landed between the read and the claim, or a
	// later holder's did.
	if stored, err = read(); err != nil || stored != fence {
		return false, false
	}
	return true, true
}
