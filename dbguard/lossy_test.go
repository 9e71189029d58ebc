package dbguard_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"
)

// errLostAnswer is what a network driver returns when the connection
// breaks while it waits for the answer: go-sql-driver/mysql's
// ErrInvalidConn reads exactly so.
var errLostAnswer = errors.New("invalid connection")

// A lossy database loses the answer to one statement on purpose: the
// statement whose text contains the armed substring either runs and its
// answer is lost (the server committed, the connection broke), or does not
// run yet and is kept for the test to replay later (the server is still
// running it). Either way the caller gets errLostAnswer and the connection
// is discarded, as a broken one would be.
type lossy struct {
	mu     sync.Mutex
	match  string // "" when disarmed
	run    bool   // run the statement before losing its answer
	held   *heldStmt
	losses atomic.Int32
}

// heldStmt is a statement the "server" has not run yet.
type heldStmt struct {
	query string
	args  []any
}

// arm makes the next statement containing match lose its answer, after
// running it (run) or before.
func (l *lossy) arm(match string, run bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.match, l.run, l.held = match, run, nil
}

// take reports whether query is the armed statement, and disarms.
func (l *lossy) take(query string, args []driver.NamedValue) (hit, run bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.match == "" || !strings.Contains(query, l.match) {
		return false, false
	}
	run = l.run
	if !run {
		h := &heldStmt{query: query}
		for _, a := range args {
			h.args = append(h.args, a.Value)
		}
		l.held = h
	}
	l.match = ""
	l.losses.Add(1)
	return true, run
}

// replay runs the held statement on db, as the server finishing it would,
// and returns the rows it changed.
func (l *lossy) replay(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	l.mu.Lock()
	h := l.held
	l.mu.Unlock()
	if h == nil {
		t.Fatal("no statement held")
	}
	res, err := db.ExecContext(context.Background(), h.query, h.args...)
	if err != nil {
		t.Fatalf("replay %s: %v", h.query, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openLossySQLite opens a fresh SQLite database through a lossy driver.
func openLossySQLite(t testing.TB) (*sql.DB, *lossy) {
	t.Helper()
	l := &lossy{}
	path := filepath.Join(t.TempDir(), "stock.db")
	c := &lossyConnector{l: l, drv: &sqlite.Driver{},
		dsn: "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db, l
}

type lossyConnector struct {
	l   *lossy
	drv driver.Driver
	dsn string
}

func (c *lossyConnector) Connect(context.Context) (driver.Conn, error) {
	inner, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &lossyConn{l: c.l, inner: inner}, nil
}

// Driver is SQLite's, so that dbguard detects the dialect.
func (c *lossyConnector) Driver() driver.Driver { return c.drv }

type lossyConn struct {
	l      *lossy
	inner  driver.Conn
	broken atomic.Bool
}

// exec runs (or holds) one statement, losing its answer if it is armed.
func (c *lossyConn) exec(query string, args []driver.NamedValue, do func() (driver.Result, error)) (driver.Result, error) {
	hit, run := c.l.take(query, args)
	if !hit {
		return do()
	}
	c.broken.Store(true)
	if run {
		if _, err := do(); err != nil {
			return nil, err
		}
	}
	return nil, errLostAnswer
}

func (c *lossyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.exec(query, args, func() (driver.Result, error) {
		return c.inner.(driver.ExecerContext).ExecContext(ctx, query, args)
	})
}

func (c *lossyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.inner.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *lossyConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.inner.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &lossyStmt{c: c, inner: st, query: query}, nil
}

func (c *lossyConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *lossyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.inner.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &lossyTx{c: c, inner: tx}, nil
}

func (c *lossyConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *lossyConn) Close() error { return c.inner.Close() }

func (c *lossyConn) ResetSession(ctx context.Context) error {
	if c.broken.Load() {
		return driver.ErrBadConn
	}
	return c.inner.(driver.SessionResetter).ResetSession(ctx)
}

func (c *lossyConn) IsValid() bool { return !c.broken.Load() }

type lossyStmt struct {
	c     *lossyConn
	inner driver.Stmt
	query string
}

func (s *lossyStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.exec(s.query, args, func() (driver.Result, error) {
		return s.inner.(driver.StmtExecContext).ExecContext(ctx, args)
	})
}

func (s *lossyStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.inner.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *lossyStmt) Close() error  { return s.inner.Close() }
func (s *lossyStmt) NumInput() int { return s.inner.NumInput() }

func (s *lossyStmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, errors.New("lossy: Exec without context")
}

func (s *lossyStmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, errors.New("lossy: Query without context")
}

// lossyTx loses the answer of its COMMIT when "COMMIT" is armed.
type lossyTx struct {
	c     *lossyConn
	inner driver.Tx
}

func (tx *lossyTx) Commit() error {
	_, err := tx.c.exec("COMMIT", nil, func() (driver.Result, error) { return nil, tx.inner.Commit() })
	return err
}

func (tx *lossyTx) Rollback() error { return tx.inner.Rollback() }
