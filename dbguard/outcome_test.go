package dbguard_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/latchkey/latchkey/dbguard"
)

// outcomeRecorder is an Observer that keeps the outcomes it hears.
type outcomeRecorder struct {
	mu       sync.Mutex
	outcomes []string
}

func (r *outcomeRecorder) DeductStart(ctx context.Context, _ string, _ dbguard.Strategy) (context.Context, func(dbguard.DeductResult)) {
	return ctx, func(res dbguard.DeductResult) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.outcomes = append(r.outcomes, res.Outcome())
	}
}

func (r *outcomeRecorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.outcomes) == 0 {
		return ""
	}
	return r.outcomes[len(r.outcomes)-1]
}

// TestLostAnswer: the database commits a deduction and the connection
// breaks before the answer comes back. A Locked deduction reads the row's
// fence and returns the truth (nil here); the others cannot tell and
// return ErrOutcomeUnknown, never an ordinary failure that a retry would
// turn into a double deduction.
func TestLostAnswer(t *testing.T) {
	for _, tc := range []struct {
		strategy dbguard.Strategy
		many     bool   // DeductMany of two SKUs (the COMMIT's answer is lost)
		match    string // the statement whose answer is lost
		settled  bool   // the Guard settles the outcome: nil, not ErrOutcomeUnknown
	}{
		{dbguard.Atomic, false, "qty - ?", false},
		{dbguard.Optimistic, false, "qty - ?", false},
		{dbguard.Locked, false, "qty - ?", true},
		{dbguard.Auto, false, "qty - ?", true},
		{dbguard.Atomic, true, "COMMIT", false},
		{dbguard.RowLock, false, "COMMIT", false},
		{dbguard.RowLock, true, "COMMIT", false},
		{dbguard.Optimistic, true, "COMMIT", false},
		{dbguard.Locked, true, "COMMIT", true},
	} {
		name := tc.strategy.String()
		if tc.many {
			name += "/many"
		}
		t.Run(name, func(t *testing.T) {
			db, loss := openLossySQLite(t)
			rec := &outcomeRecorder{}
			g, _ := newGuard(t, db, map[string]int64{"a": 5, "b": 5},
				append(strategyOpts(t, tc.strategy), dbguard.WithObserver(rec))...)
			ctx := ctxFor(t, 30*time.Second)
			loss.arm(tc.match, true)
			var err error
			if tc.many {
				err = g.DeductMany(ctx, map[string]int64{"a": 1, "b": 2})
			} else {
				err = g.Deduct(ctx, "a", 1)
			}
			if n := loss.losses.Load(); n != 1 {
				t.Fatalf("%d answers lost, want 1", n)
			}
			if a := mustStock(t, g, "a"); a != 4 {
				t.Fatalf("stock of a: %d, want 4 (the deduction committed)", a)
			}
			st := g.Stats()
			if tc.settled {
				if err != nil {
					t.Fatalf("the deduction committed, but the call returned %v", err)
				}
				if st.Deductions != 1 || st.Settled != 1 || st.Failed != 0 || st.OutcomeUnknown != 0 {
					t.Errorf("stats %+v, want 1 deduction, 1 settled", st)
				}
				if got := rec.last(); got != dbguard.OutcomeDeducted {
					t.Errorf("observer heard %q, want %q", got, dbguard.OutcomeDeducted)
				}
				return
			}
			if !errors.Is(err, dbguard.ErrOutcomeUnknown) || !errors.Is(err, errLostAnswer) {
				t.Fatalf("got %v, want ErrOutcomeUnknown wrapping the driver's error", err)
			}
			if errors.Is(err, dbguard.ErrBusy) || errors.Is(err, dbguard.ErrInsufficientStock) {
				t.Errorf("%v also matches an answer about the stock", err)
			}
			if st.OutcomeUnknown != 1 || st.Failed != 0 || st.Deductions != 0 {
				t.Errorf("stats %+v, want 1 outcome unknown and nothing else", st)
			}
			if got := rec.last(); got != dbguard.OutcomeUnknown {
				t.Errorf("observer heard %q, want %q", got, dbguard.OutcomeUnknown)
			}
		})
	}
}

// TestLostAnswerNotRun: the connection breaks after a Locked deduction's
// write was sent, and the server has not run it (yet). The Guard finds the
// row without its fence and claims the fence first, so the call is an
// ordinary failure — and the write, when the server gets to it at last,
// changes nothing.
func TestLostAnswerNotRun(t *testing.T) {
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprintf("many=%v", many), func(t *testing.T) {
			db, loss := openLossySQLite(t)
			g, _ := newGuard(t, db, map[string]int64{"a": 5, "b": 5}, strategyOpts(t, dbguard.Locked)...)
			ctx := ctxFor(t, 30*time.Second)
			loss.arm("qty - ?", false)
			var err error
			if many {
				err = g.DeductMany(ctx, map[string]int64{"a": 1, "b": 2})
			} else {
				err = g.Deduct(ctx, "a", 1)
			}
			if err == nil || errors.Is(err, dbguard.ErrOutcomeUnknown) || !errors.Is(err, errLostAnswer) {
				t.Fatalf("got %v, want the driver's error, not ErrOutcomeUnknown", err)
			}
			if n := loss.replay(t, db); n != 0 {
				t.Fatalf("the held write changed %d rows after the call failed", n)
			}
			if a, b := mustStock(t, g, "a"), mustStock(t, g, "b"); a != 5 || b != 5 {
				t.Fatalf("stock a=%d b=%d after a failed deduction, want 5 5", a, b)
			}
			// A write inside a transaction cannot commit without COMMIT:
			// its error is a plain failure, and needs no settling.
			settled := int64(1)
			if many {
				settled = 0
			}
			if st := g.Stats(); st.Failed != 1 || st.Settled != settled || st.OutcomeUnknown != 0 {
				t.Errorf("stats %+v, want 1 failed, %d settled", st, settled)
			}
			// The SKU still sells: the next holder's fence is higher.
			must(t, g.Deduct(ctx, "a", 1))
		})
	}
}

// TestMayHaveCommitted: which driver errors leave a commit in doubt.
func TestMayHaveCommitted(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name string
		live bool
		err  error
		want bool
	}{
		{"nil", true, nil, false},
		{"mysql invalid connection", true, mysql.ErrInvalidConn, true},
		{"mysql connection killed", true, &mysql.MySQLError{Number: 1927, Message: "Connection was killed"}, true},
		{"mysql deadlock", true, &mysql.MySQLError{Number: 1213, Message: "Deadlock"}, false},
		{"postgres admin shutdown", true, &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, false},
		{"unexpected EOF", true, fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"EOF", true, io.EOF, true},
		{"connection reset", true, read, true},
		{"broken pipe", true, syscall.EPIPE, true},
		{"closed", true, net.ErrClosed, true},
		{"context ended in flight", true, context.Canceled, true},
		{"context ended before", false, context.Canceled, false},
		{"deadline before", false, context.DeadlineExceeded, false},
		{"bad conn: nothing sent", true, fmt.Errorf("x: %w", driver.ErrBadConn), false},
		{"dial", true, dial, false},
		{"pgx safe to retry", true, retryErr{safe: true}, false},
		{"pgx sent", true, retryErr{safe: false}, true},
		{"anything else", true, errors.New("syntax error"), false},
	} {
		if got := dbguard.MayHaveCommitted(tc.live, tc.err); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// retryErr is a pgconn-like error that says whether it is safe to retry.
type retryErr struct{ safe bool }

func (e retryErr) Error() string     { return fmt.Sprintf("pgconn: safe to retry %v", e.safe) }
func (e retryErr) SafeToRetry() bool { return e.safe }
