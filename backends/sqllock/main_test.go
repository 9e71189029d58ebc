package sqllock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/sqllock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/dbtest"
	"go.uber.org/goleak"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A database the tests run on: open returns a fresh pool and the options
// that put the tables of this test under a name of their own (dropped when
// the test ends).
type database struct {
	name string
	open func(t testing.TB) *sql.DB
}

var databases = []database{
	{"sqlite", openSQLite},
	{"postgres", func(t testing.TB) *sql.DB {
		return dbtest.Open(t, "pgx", dbtest.PostgresURL(), "PostgreSQL (set DATABASE_URL)", 6)
	}},
	{"mariadb", func(t testing.TB) *sql.DB {
		return dbtest.Open(t, "mysql", dbtest.MySQLDSN(), "MariaDB/MySQL (set MYSQL_DSN)", 6)
	}},
}

// sqliteFiles: every pool of one test opens the same file.
var (
	sqliteMu    sync.Mutex
	sqliteFiles = map[string]string{}
)

func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	// Every pool a test (or subtest) opens shares one file, as processes
	// on one host would.
	name := t.Name()
	sqliteMu.Lock()
	path, ok := sqliteFiles[name]
	if !ok {
		path = filepath.Join(t.TempDir(), "locks.db")
		sqliteFiles[name] = path
		t.Cleanup(func() { // a benchmark runs again under the same name
			sqliteMu.Lock()
			delete(sqliteFiles, name)
			sqliteMu.Unlock()
		})
	}
	sqliteMu.Unlock()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
}

// table migrates a pair of tables no other test uses on db and drops them
// when the test ends; it returns the option naming them.
func table(t testing.TB, db *sql.DB) sqllock.Option {
	t.Helper()
	name := "lkt_" + strings.ToLower(rand.Text()[:12])
	opt := sqllock.WithTable(name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqllock.Migrate(ctx, db, opt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tb := range []string{name, name + "_records"} {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb); err != nil {
				t.Errorf("drop %s: %v", tb, err)
			}
		}
	})
	return opt
}

// newClient makes a Client on db with opts, closed when the test ends.
func newClient(t testing.TB, db *sql.DB, opts ...sqllock.Option) *core.Client {
	t.Helper()
	c, err := sqllock.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
