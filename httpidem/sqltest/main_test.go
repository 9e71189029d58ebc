package sqltest_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/dbtest"
	"github.com/latchkey/latchkey/internal/redistest"
	"go.uber.org/goleak"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Servers used by the tests, overridable from the environment.
const (
	// poolSize bounds the connections one pool opens to a shared server.
	poolSize = 6
)

// A database the tests run on.
type database struct {
	name    string
	driver  string
	dialect httpidem.Dialect
	dsn     func(t testing.TB) string // SQLite: a fresh file
	what    string                    // how to point the tests at the server
}

// databases are SQLite (always there) and the real servers.
var databases = []database{
	{"sqlite", "sqlite", httpidem.SQLite, sqliteDSN, ""},
	{"postgres", "pgx", httpidem.Postgres, func(testing.TB) string { return dbtest.PostgresURL() }, "PostgreSQL (set DATABASE_URL)"},
	{"mariadb", "mysql", httpidem.MySQL, func(testing.TB) string { return dbtest.MySQLDSN() }, "MariaDB/MySQL (set MYSQL_DSN)"},
}

// eachDB runs fn as a parallel subtest on every database; a server that
// does not answer skips its subtest (fails it with
// LATCHKEY_REQUIRE_SERVERS=1).
func eachDB(t *testing.T, fn func(t *testing.T, d database)) {
	t.Helper()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// sqliteDSN names a fresh SQLite file, opened as NewSQLStore recommends:
// a busy timeout, WAL and immediate transactions.
func sqliteDSN(t testing.TB) string {
	return "file:" + filepath.Join(t.TempDir(), "idem.db") +
		"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// open opens a pool on d, or skips (fails) when its server does not
// answer a ping within two seconds. It is closed when the test ends.
func (d database) open(t testing.TB) *sql.DB {
	t.Helper()
	return d.openDSN(t, d.dsn(t))
}

func (d database) openDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d.ready(t, db, dsn)
	return db
}

// openFaulty opens a pool on d whose COMMITs the test can break (see
// faultyPool), on the same database as d.open would.
func (d database) openFaulty(t testing.TB) (*sql.DB, *faults) {
	t.Helper()
	dsn := d.dsn(t)
	db, f := faultyPool(t, d.driver, dsn)
	d.ready(t, db, dsn)
	return db, f
}

// ready sizes db's pool and skips (fails) the test when it does not
// answer.
func (d database) ready(t testing.TB, db *sql.DB, dsn string) {
	t.Helper()
	if d.driver == "sqlite" {
		db.SetMaxOpenConns(4) // one writer: a few connections, no more
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		redistest.Unavailable(t, "no %s answers at %s: %v", d.what, dbtest.Redact(dsn), err)
	}
	db.SetMaxOpenConns(poolSize)
	db.SetMaxIdleConns(poolSize)
}

// tableName returns a table name no other test or run uses, and drops the
// table when the test ends.
func tableName(t testing.TB, db *sql.DB, what string) string {
	t.Helper()
	name := "lkt_" + what + "_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

// newStore makes a SQLStore on fresh tables, migrated; the store is
// closed, then its tables dropped, when the test ends.
func newStore(t testing.TB, db *sql.DB, opts ...httpidem.SQLStoreOption) *httpidem.SQLStore {
	t.Helper()
	s, _ := newStoreTables(t, db, opts...)
	return s
}

// newStoreTables is newStore, also returning the name of the
// idempotency table.
func newStoreTables(t testing.TB, db *sql.DB, opts ...httpidem.SQLStoreOption) (*httpidem.SQLStore, string) {
	t.Helper()
	idem, claims := tableName(t, db, "idem"), tableName(t, db, "claims")
	s, err := httpidem.NewSQLStore(db, append([]httpidem.SQLStoreOption{httpidem.WithTables(idem, claims)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, idem
}

// ph returns the n-th bind parameter (from 1) of dialect d.
func ph(d httpidem.Dialect, n int) string {
	if d == httpidem.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// count returns the result of a SELECT COUNT(*) query.
func count(t testing.TB, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
