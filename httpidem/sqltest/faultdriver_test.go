package sqltest_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// A commitFault is what the next COMMIT of a faulty pool does.
type commitFault int

const (
	commitNormally commitFault = iota
	// commitNever rolls back and reports a broken connection: the process
	// died, or the network failed, before COMMIT reached the database.
	commitNever
	// commitAnswerLost commits, then reports a broken connection: the
	// COMMIT happened but its answer never came back.
	commitAnswerLost
)

// faults are the failures a faulty pool injects, one at a time.
type faults struct {
	mu           sync.Mutex
	next         commitFault
	beforeCommit func() // if set, runs (once) before the next COMMIT
	// lateMatch and lateBy hold back, once, the answer of the next
	// statement run outside a transaction whose text contains lateMatch:
	// it runs, and its answer comes lateBy later (a stalled connection).
	lateMatch string
	lateBy    time.Duration
}

// answerLate holds back the answer of the next statement containing match
// by d, after the database ran it.
func (f *faults) answerLate(match string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lateMatch, f.lateBy = match, d
}

// late returns how long to hold back the answer of query (once).
func (f *faults) late(query string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lateMatch == "" || !strings.Contains(query, f.lateMatch) {
		return 0
	}
	d := f.lateBy
	f.lateMatch, f.lateBy = "", 0
	return d
}

func (f *faults) failNextCommit(c commitFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = c
}

func (f *faults) holdNextCommit(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beforeCommit = hook
}

func (f *faults) take() (commitFault, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, hook := f.next, f.beforeCommit
	f.next, f.beforeCommit = commitNormally, nil
	return c, hook
}

// errInjected is what a faulty COMMIT reports: a broken connection, as
// the driver would, and not an answer from the database.
var errInjected = errors.New("injected: connection lost during COMMIT")

// faultyPool opens a pool whose connections wrap those of the driver
// named driverName, so that tests can break its COMMITs. Its connector
// reports that driver, so the store still detects the dialect.
func faultyPool(t testing.TB, driverName, dsn string) (*sql.DB, *faults) {
	t.Helper()
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	drv := probe.Driver()
	probe.Close()
	c := &faultConnector{drv: drv, dsn: dsn, f: &faults{}}
	if dc, ok := drv.(driver.DriverContext); ok {
		if c.inner, err = dc.OpenConnector(dsn); err != nil {
			t.Fatal(err)
		}
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(poolSize)
	t.Cleanup(func() { db.Close() })
	return db, c.f
}

type faultConnector struct {
	drv   driver.Driver
	inner driver.Connector // nil: drv.Open(dsn)
	dsn   string
	f     *faults
}

func (c *faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var conn driver.Conn
	var err error
	if c.inner != nil {
		conn, err = c.inner.Connect(ctx)
	} else {
		conn, err = c.drv.Open(c.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: conn, f: c.f}, nil
}

func (c *faultConnector) Driver() driver.Driver { return c.drv }

// faultConn passes everything to the real connection, and wraps its
// transactions.
type faultConn struct {
	driver.Conn
	f *faults
}

func (c *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("faulty pool: the driver has no BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &faultTx{Tx: tx, f: c.f}, nil
}

func (c *faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &faultStmt{Stmt: st, query: query, f: c.f}, nil
}

// faultStmt is a prepared statement whose answer a late fault can hold
// back (a driver that does not run statements with arguments directly
// prepares them: MySQL's, unless it interpolates).
type faultStmt struct {
	driver.Stmt
	query string
	f     *faults
}

func (s *faultStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	var res driver.Result
	var err error
	e, ok := s.Stmt.(driver.StmtExecContext)
	if !ok { // every driver these tests use has it
		return nil, errors.New("faultdriver: the driver's statements lack ExecContext")
	}
	res, err = e.ExecContext(ctx, args)
	if d := s.f.late(s.query); d > 0 {
		time.Sleep(d)
	}
	return res, err
}

func (s *faultStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.Stmt.(driver.StmtQueryContext)
	if !ok { // every driver these tests use has it
		return nil, errors.New("faultdriver: the driver's statements lack QueryContext")
	}
	return q.QueryContext(ctx, args)
}

func (s *faultStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *faultConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		res, err := e.ExecContext(ctx, query, args)
		if errors.Is(err, driver.ErrSkip) { // not run: it comes back prepared
			return res, err
		}
		if d := c.f.late(query); d > 0 {
			time.Sleep(d)
		}
		return res, err
	}
	return nil, driver.ErrSkip
}

func (c *faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.Conn.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *faultConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *faultConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *faultConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// faultTx commits as its faults say.
type faultTx struct {
	driver.Tx
	f *faults
}

func (tx *faultTx) Commit() error {
	fault, hook := tx.f.take()
	if hook != nil {
		hook()
	}
	switch fault {
	case commitNever:
		_ = tx.Tx.Rollback()
		return errInjected
	case commitAnswerLost:
		if err := tx.Tx.Commit(); err != nil {
			return err
		}
		return errInjected
	}
	return tx.Tx.Commit()
}
