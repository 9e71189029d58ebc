package dbguard

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// stmtCache holds the Guard's statements, prepared on first use: each then
// costs one round trip (MySQL would otherwise prepare, run and close it)
// and no parsing (SQLite). A statement that fails to prepare — the table
// is not there yet, the context ended — is run unprepared and tried again
// next time.
type stmtCache struct {
	mu     sync.Mutex // never held across a database/sql call
	m      map[string]*sql.Stmt
	closed bool
	warm   atomic.Bool // every transaction statement is prepared
}

// lookup returns query if it is prepared already, or nil. Inside a
// transaction, which holds a connection, preparing would take a second
// one from the pool: a full pool would then deadlock.
func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// prepareAll prepares queries, once they all succeed. Call it without
// holding a connection.
func (c *stmtCache) prepareAll(ctx context.Context, db *sql.DB, queries ...string) {
	if c.warm.Load() {
		return
	}
	for _, q := range queries {
		if c.get(ctx, db, q) == nil {
			return
		}
	}
	c.warm.Store(true)
}

// get returns query prepared on db, or nil.
func (c *stmtCache) get(ctx context.Context, db *sql.DB, query string) *sql.Stmt {
	c.mu.Lock()
	st, closed := c.m[query], c.closed
	c.mu.Unlock()
	if st != nil || closed {
		return st
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	prev, closed := c.m[query], c.closed
	if prev == nil && !closed {
		if c.m == nil {
			c.m = make(map[string]*sql.Stmt)
		}
		c.m[query] = st
	}
	c.mu.Unlock()
	if prev != nil || closed {
		// Another caller won the race, or Close came first. Closing waits
		// for connections that may be busy: never under c.mu.
		_ = st.Close()
		return prev
	}
	return st
}

// close closes every prepared statement; later calls run unprepared.
func (c *stmtCache) close() error {
	c.mu.Lock()
	c.closed = true
	m := c.m
	c.m = nil
	c.mu.Unlock()
	var first error
	for _, st := range m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// exec runs a statement on q — prepared when q is the Guard's *sql.DB or
// one of its transactions — and returns the number of rows it changed.
func (g *Guard) exec(ctx context.Context, q querier, query string, args ...any) (int64, error) {
	var (
		res sql.Result
		err error
	)
	switch q := q.(type) {
	case *sql.DB:
		if st := g.stmts.get(ctx, q, query); st != nil {
			res, err = st.ExecContext(ctx, args...)
			break
		}
		res, err = q.ExecContext(ctx, query, args...)
	case *sql.Tx:
		if st := g.stmts.lookup(query); st != nil {
			res, err = q.StmtContext(ctx, st).ExecContext(ctx, args...)
			break
		}
		res, err = q.ExecContext(ctx, query, args...)
	default:
		res, err = q.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs a single-row query on q, prepared like exec.
func (g *Guard) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	switch q := q.(type) {
	case *sql.DB:
		if st := g.stmts.get(ctx, q, query); st != nil {
			return st.QueryRowContext(ctx, args...)
		}
	case *sql.Tx:
		if st := g.stmts.lookup(query); st != nil {
			return q.StmtContext(ctx, st).QueryRowContext(ctx, args...)
		}
	}
	return q.QueryRowContext(ctx, query, args...)
}

// Close releases the statements the Guard prepared. It does not close the
// *sql.DB, and the Guard keeps working after it (unprepared). A Guard is
// meant to live as long as its database handle: closing the *sql.DB
// releases the statements too.
func (g *Guard) Close() error {
	return g.stmts.close()
}
