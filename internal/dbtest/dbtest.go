// Package dbtest finds and opens the SQL servers the tests of several
// modules run on (dbguard, httpidem/sqltest, backends/sqllock): the same
// defaults, the same environment variables, the same skip-or-fail when a
// server does not answer. It registers no driver: each test module
// imports the drivers it uses.
package dbtest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// The servers of the machine the tests run on, unless the environment
// names others.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQL    = "root@tcp(127.0.0.1:3306)/test"
)

// PostgresURL is $DATABASE_URL when it names PostgreSQL, else
// DefaultPostgres.
func PostgresURL() string {
	if u := os.Getenv("DATABASE_URL"); strings.HasPrefix(u, "postgres") {
		return u
	}
	return DefaultPostgres
}

// MySQLDSN is $MYSQL_DSN (a go-sql-driver/mysql DSN), else DefaultMySQL.
func MySQLDSN() string {
	if d := os.Getenv("MYSQL_DSN"); d != "" {
		return d
	}
	return DefaultMySQL
}

// Open opens a pool of at most conns connections with driver on dsn, and
// closes it when the test ends. A server that does not answer a ping
// within two seconds skips the test, or fails it with
// LATCHKEY_REQUIRE_SERVERS=1; what names the server and how to point the
// tests at another ("PostgreSQL (set DATABASE_URL)").
func Open(t testing.TB, driver, dsn, what string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		redistest.Unavailable(t, "%s: %v", what, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		redistest.Unavailable(t, "no %s answers at %s: %v", what, Redact(dsn), err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

// Redact hides the password of a URL or of a user:password@… DSN, for
// messages.
func Redact(dsn string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			return u.Redacted()
		}
		return "(unparsable URL)"
	}
	if at := strings.LastIndex(dsn, "@"); at >= 0 {
		if colon := strings.Index(dsn[:at], ":"); colon >= 0 {
			return dsn[:colon] + ":xxxxx" + dsn[at:]
		}
	}
	return dsn
}
