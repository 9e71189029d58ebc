package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/sqldialect"
)

// DDL returns the statements that create the two tables for d, with the
// options' table name (WithTable), for a migration tool of your own. They
// are idempotent (CREATE TABLE IF NOT EXISTS). Migrate runs them.
//
// The leases table has one row per key: its holder's token and metadata
// (empty when free), its fence, and its expiry in milliseconds since the
// Unix epoch by the database's clock. A released lease keeps its row, and
// so its fence, until cleanup deletes rows expired more than five minutes
// ago (see the package documentation for why fences still rise). The
// records table keeps Client.Records.
func DDL(d Dialect, opts ...Option) ([]string, error) {
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	if d == DetectDialect {
		return nil, fmt.Errorf("%w: sqllock: DDL needs a dialect", core.ErrInvalidOption)
	}
	return ddl(d, cfg.table), nil
}

func ddl(d Dialect, table string) []string {
	// Keys, metadata and records are any bytes (a NUL, invalid UTF-8):
	// binary columns, compared byte for byte. MaxKeyLen + a prefix fits.
	// Tokens are compared byte for byte too: MySQL's VARCHAR compares in
	// the table's collation, by default without case (and trailing
	// spaces), so a deposed holder's late Release of "Worker-1" would free
	// the lease of its successor "worker-1" (rule 3 of core.Backend).
	name, text, token := "TEXT", "TEXT", "VARCHAR(160)"
	switch d {
	case sqldialect.Postgres:
		name, text = "BYTEA", "BYTEA"
	case sqldialect.MySQL:
		name, text, token = "VARBINARY(1400)", "MEDIUMBLOB", "VARBINARY(160)"
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS " + table + " (" +
			"name " + name + " NOT NULL PRIMARY KEY, " +
			"token " + token + " NOT NULL, " +
			"meta " + text + " NOT NULL, " +
			"fence BIGINT NOT NULL, " +
			"expires_ms BIGINT NOT NULL, " +
			"ver BIGINT NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + table + "_records (" +
			"name " + name + " NOT NULL PRIMARY KEY, " +
			"value " + text + " NOT NULL, " +
			"ord BIGINT NULL, " +
			"expires_ms BIGINT NOT NULL, " +
			"ver BIGINT NOT NULL)",
	}
}

// Migrate creates the tables if they do not exist. The dialect is read
// from db's driver unless WithDialect names it.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	if db == nil {
		return fmt.Errorf("%w: sqllock: nil *sql.DB", core.ErrInvalidOption)
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return cfg.err
	}
	d, err := dialectOf(db, cfg.dialect)
	if err != nil {
		return err
	}
	for _, q := range ddl(d, cfg.table) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%w: sqllock: migrate: %w", core.ErrUnavailable, err)
		}
	}
	return nil
}

func dialectOf(db *sql.DB, d Dialect) (Dialect, error) {
	if d != DetectDialect {
		return d, nil
	}
	if d = sqldialect.Of(db); d == DetectDialect {
		return d, fmt.Errorf("%w: sqllock: cannot tell the SQL dialect of driver %T: use WithDialect", core.ErrInvalidOption, db.Driver())
	}
	return d, nil
}

// queries are the statements of one table set in one dialect.
type queries struct {
	lock, insert, read, write, release, inspect, list, cleanup         string
	recLock, recInsert, recRead, recWrite, recGet, recList, recCleanup string
}

// nowMs is the database clock in milliseconds since the Unix epoch, and
// nowUs in microseconds.
func nowExprs(d Dialect) (ms, us string) {
	switch d {
	case sqldialect.Postgres:
		return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
			"CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
	case sqldialect.MySQL:
		// UNIX_TIMESTAMP() (whole seconds) and NOW(6) both read the
		// statement's start; neither the sum nor the microseconds depend
		// on the session time zone, where UNIX_TIMESTAMP(NOW(6)) would
		// (an hour off across a daylight-saving change).
		return "(UNIX_TIMESTAMP() * 1000 + MICROSECOND(NOW(6)) DIV 1000)",
			"(UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6)))"
	}
	// SQLite's 'now' is whole milliseconds, but julianday is a double of
	// days: the product lands a few µs off the millisecond, and CAST
	// truncates (1000.99997 → 1000, a millisecond early). ROUND gives the
	// millisecond exactly; there are no microseconds to read.
	return "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
		"(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
}

func buildQueries(d Dialect, t string) queries {
	ms, us := nowExprs(d)
	rt := t + "_records"
	ignore := func(q string) string { // insert a placeholder row unless there is one
		if d == sqldialect.MySQL {
			return strings.Replace(q, "INSERT INTO", "INSERT IGNORE INTO", 1)
		}
		return q + " ON CONFLICT (name) DO NOTHING"
	}
	q := queries{
		// Taking the row's write lock first makes the transaction's
		// read-decide-write atomic on every database (SQLite has no FOR
		// UPDATE; an UPDATE takes its write lock). A placeholder row and a
		// released one expire now, not at 0: cleanup keeps them (and a
		// released row's fence) for the retention, instead of deleting
		// the first under a transaction about to lock it, and the second
		// with its fence at once.
		lock:    "UPDATE " + t + " SET ver = ver + 1 WHERE name = ?",
		insert:  ignore("INSERT INTO " + t + " (name, token, meta, fence, expires_ms, ver) VALUES (?, '', '', 0, " + ms + ", 0)"),
		read:    "SELECT token, meta, fence, expires_ms, " + ms + ", " + us + " FROM " + t + " WHERE name = ?",
		write:   "UPDATE " + t + " SET token = ?, meta = ?, fence = ?, expires_ms = ? WHERE name = ?",
		release: "UPDATE " + t + " SET token = '', meta = '', expires_ms = " + ms + ", ver = ver + 1 WHERE name = ? AND token = ? AND expires_ms > " + ms,
		inspect: "SELECT token, meta, fence, expires_ms, " + ms + " FROM " + t + " WHERE name = ?",
		list:    "SELECT name FROM " + t + " WHERE name > ? AND expires_ms > " + ms + " AND token <> '' ORDER BY name LIMIT " + strconv.Itoa(listPage),
		cleanup: "DELETE FROM " + t + " WHERE expires_ms < " + ms + " - ?",

		recLock:    "UPDATE " + rt + " SET ver = ver + 1 WHERE name = ?",
		recInsert:  ignore("INSERT INTO " + rt + " (name, value, ord, expires_ms, ver) VALUES (?, '', NULL, " + ms + ", 0)"),
		recRead:    "SELECT ord, expires_ms, " + ms + " FROM " + rt + " WHERE name = ?",
		recWrite:   "UPDATE " + rt + " SET value = ?, ord = ?, expires_ms = ? WHERE name = ?",
		recGet:     "SELECT value FROM " + rt + " WHERE name = ? AND expires_ms > " + ms,
		recList:    "SELECT name FROM " + rt + " WHERE name > ? AND expires_ms > " + ms + " ORDER BY name LIMIT " + strconv.Itoa(listPage),
		recCleanup: "DELETE FROM " + rt + " WHERE expires_ms < " + ms + " - ?",
	}
	if d == sqldialect.Postgres {
		for _, p := range []*string{&q.lock, &q.insert, &q.read, &q.write, &q.release, &q.inspect, &q.list, &q.cleanup,
			&q.recLock, &q.recInsert, &q.recRead, &q.recWrite, &q.recGet, &q.recList, &q.recCleanup} {
			*p = rebind(*p)
		}
	}
	return q
}

// listPage is how many names one listing query reads.
const listPage = 100

// rebind turns ? placeholders into $1, $2, … (the queries hold no other
// question marks).
func rebind(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}
