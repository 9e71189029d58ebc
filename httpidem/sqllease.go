package httpidem

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// tokenBytes is the size of a lease token, stored as hex.
const tokenBytes = 16

func newLeaseToken() []byte {
	var b [tokenBytes]byte
	_, _ = rand.Read(b[:]) // never fails
	return []byte(hex.EncodeToString(b[:]))
}

// renewRetry bounds the pause before a failed renewal is tried again.
const renewRetry = 200 * time.Millisecond

// leaseMargin is how much earlier than the database a lease's holder
// believes it lost: 1% of the TTL plus 2 ms, at most a tenth of it, as
// core's drift margin.
func leaseMargin(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/10)
}

// sqlLease is a Lease on a row of a SQLStore's idempotency table: the key,
// kind lease, and a token no other acquisition has. Every write to the
// row compares the token. A goroutine renews it every third of its TTL;
// it is lost when a renewal finds the row gone or taken over, or when no
// renewal succeeded by its belief deadline — the send time of the last
// write the database confirmed, plus the TTL, minus leaseMargin.
type sqlLease struct {
	s     *SQLStore
	key   []byte
	token []byte
	ttl   time.Duration
	sent  time.Time // when the row was written

	lost      chan struct{}
	stopRenew context.CancelFunc
	renewCtx  context.Context
	renewed   chan struct{} // closed when renew returns

	mu    sync.Mutex
	err   error // set, matching ErrLost, once lost
	ended bool  // Complete or Release began
}

func newSQLLease(s *SQLStore, key, token []byte, ttl time.Duration, sent time.Time) *sqlLease {
	ctx, cancel := context.WithCancel(context.Background())
	return &sqlLease{s: s, key: key, token: token, ttl: ttl, sent: sent,
		lost: make(chan struct{}), renewCtx: ctx, stopRenew: cancel, renewed: make(chan struct{})}
}

func (l *sqlLease) Lost() <-chan struct{} { return l.lost }

func (l *sqlLease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lose marks the lease lost, unless it ended or was lost already.
func (l *sqlLease) lose(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.ended {
		return
	}
	l.err = fmt.Errorf("%w: %w", ErrLost, cause)
	close(l.lost)
}

// renew keeps the lease alive until it ends or is lost. The belief
// deadline has a timer of its own, so a renewal stuck in the database
// (a lock wait, a dead connection) cannot keep the holder believing.
func (l *sqlLease) renew() {
	defer close(l.renewed)
	deadline := l.sent.Add(l.ttl - leaseMargin(l.ttl))
	belief := time.AfterFunc(time.Until(deadline), func() {
		l.lose(fmt.Errorf("no renewal was confirmed within the lease's %v", l.ttl))
	})
	defer belief.Stop()
	every := l.ttl / 3
	next := time.NewTimer(every)
	defer next.Stop()
	for {
		select {
		case <-l.renewCtx.Done():
			return
		case <-l.lost:
			return
		case <-next.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithDeadline(l.renewCtx, deadline)
		res, err := l.s.db.ExecContext(ctx, l.s.q.renewLease, l.ttl.Milliseconds(), l.key, l.token)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		cancel()
		switch {
		case err == nil && n == 1:
			deadline = sent.Add(l.ttl - leaseMargin(l.ttl))
			belief.Reset(time.Until(deadline)) // if it fired meanwhile, the lease stays lost
			next.Reset(every)
		case err == nil:
			l.lose(errors.New("the lease was taken over or had expired"))
			return
		default: // try again while the lease may still be ours
			next.Reset(min(every, renewRetry))
		}
	}
}

// end stops the renewal and marks the lease ended, so that it is never
// reported lost afterwards; false if it had ended already.
func (l *sqlLease) end() bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	l.mu.Unlock()
	l.stopRenew()
	<-l.renewed
	l.s.forget(l)
	return true
}

// Release implements Lease: it deletes the lease row if it still carries
// the lease's token. A lease that had ended returns nil; one whose row
// was gone or taken over returns an error matching ErrLost.
func (l *sqlLease) Release(ctx context.Context) error {
	if !l.end() {
		return nil
	}
	return l.deleteRow(ctx)
}

func (l *sqlLease) deleteRow(ctx context.Context) error {
	res, err := l.s.db.ExecContext(ctx, l.s.q.releaseLease, l.key, l.token)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		return storeErr("release lease", err)
	case n == 0:
		return fmt.Errorf("%w: the lease had expired or was taken over", ErrLost)
	}
	return nil
}

// errLeaseGone and errLaterRecord end Complete's transaction.
var (
	errLeaseGone   = errors.New("the lease was taken over or had expired and was deleted")
	errLaterRecord = errors.New("a later request stored its response first")
)

// Complete implements Lease: in one short transaction it deletes the
// lease row (compare and delete on the token) and inserts the response
// row, so that a duplicate never finds the key neither in flight nor
// completed. A lease that was lost or ended stores nothing.
func (l *sqlLease) Complete(ctx context.Context, rec *Record, ttl time.Duration) error {
	if ttl < time.Millisecond {
		_ = l.Release(ctx)
		return fmt.Errorf("%w: record ttl %v", ErrInvalidArgument, ttl)
	}
	if !l.end() {
		return fmt.Errorf("%w: the lease had ended", ErrLost)
	}
	if err := l.Err(); err != nil {
		_ = l.deleteRow(ctx)
		return err
	}
	err := l.s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, l.s.q.releaseLease, l.key, l.token)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		switch {
		case err != nil:
			return err
		case n == 0:
			return errLeaseGone
		}
		stored, err := l.s.putRecord(ctx, tx, l.key, l.token, rec, ttl)
		if err == nil && !stored {
			err = errLaterRecord
		}
		return err
	})
	switch {
	case errors.Is(err, errLeaseGone), errors.Is(err, errLaterRecord):
		return fmt.Errorf("%w: %w", ErrLost, err)
	case err != nil:
		return storeErr("store record", err)
	}
	return nil
}

// querier is what a statement runs on: the *sql.DB or a *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// putRecord inserts the response row of key, or takes over an expired
// one; false if a live one is there.
func (s *SQLStore) putRecord(ctx context.Context, q querier, key, token []byte, rec *Record, ttl time.Duration) (bool, error) {
	data, fp, ms := encodeRecord(rec, 0), bin(rec.Fingerprint), ttl.Milliseconds()
	s.wrote()
	res, err := q.ExecContext(ctx, s.q.insertRecord, key, fp, token, data, ms)
	n, err := insertedRows(s.dialect, res, err)
	if err == nil && n == 0 {
		res, err = q.ExecContext(ctx, s.q.takeRecord, fp, token, data, ms, key)
		if err == nil {
			n, err = res.RowsAffected()
		}
	}
	return n == 1, err
}

// inTx runs fn in a transaction of the store's own, committed if fn
// returns nil, and runs it again (a few times) when the database aborted
// it as a deadlock victim or busy.
func (s *SQLStore) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := s.txOnce(ctx, fn)
		if err == nil || !retryableError(s.dialect, err) || attempt == 4 {
			return err
		}
		if perr := pause(ctx, pollDelay(attempt)); perr != nil {
			return err
		}
	}
}

func (s *SQLStore) txOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
