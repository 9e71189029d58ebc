package dbguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/internal/dbtest"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Servers used by the integration tests, overridable from the environment.
const (
	// poolSize bounds the connections one pool opens to a shared server;
	// a couple of dozen pools may be open at once.
	poolSize = 4
)

// A database the tests run on.
type database struct {
	name string
	open func(t testing.TB) *sql.DB
}

// databases are SQLite (always there) and the real servers.
var databases = []database{
	{"sqlite", openSQLite},
	{"postgres", openPostgres},
	{"mariadb", openMySQL},
}

// eachDB runs fn as a parallel subtest on every database, with a pool of
// its own; a server that does not answer skips its subtest (fails it with
// LATCHKEY_REQUIRE_SERVERS=1).
func eachDB(t *testing.T, fn func(t *testing.T, db *sql.DB)) {
	t.Helper()
	eachDBOf(t, databases, fn)
}

// eachDBOpen is eachDB for tests that open several pools (one per parallel
// subtest, so that one subtest's queue for connections does not slow
// another): open skips or fails like eachDB when the server is missing.
func eachDBOpen(t *testing.T, fn func(t *testing.T, open func(testing.TB) *sql.DB)) {
	t.Helper()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, d.open)
		})
	}
}

// eachDBOf is eachDB on some of the databases.
func eachDBOf(t *testing.T, dbs []database, fn func(t *testing.T, db *sql.DB)) {
	t.Helper()
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, d.open(t))
		})
	}
}

// openSQLite opens a fresh SQLite file with one connection: SQLite has a
// single writer, and queueing for it in Go is much faster than many
// connections sleeping in SQLite's busy handler.
func openSQLite(t testing.TB) *sql.DB { return openSQLiteConns(t, 2) }

// openSQLiteConns opens a fresh SQLite file with a pool of conns
// connections, a busy timeout and WAL, as the package documentation
// recommends when several connections write.
func openSQLiteConns(t testing.TB, conns int) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stock.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	return dbtest.Open(t, "pgx", dbtest.PostgresURL(), "PostgreSQL (set DATABASE_URL)", poolSize)
}

func openMySQL(t testing.TB) *sql.DB {
	t.Helper()
	return dbtest.Open(t, "mysql", dbtest.MySQLDSN(), "MariaDB/MySQL (set MYSQL_DSN)", poolSize)
}

// tableName returns a table name no other test or run uses, and drops the
// table when the test ends.
func tableName(t testing.TB, db *sql.DB) string {
	t.Helper()
	name := "dbg_" + strings.ToLower(rand.Text()[:12])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

// newGuard makes a Guard on a fresh table, migrated, with the given stock.
func newGuard(t testing.TB, db *sql.DB, stock map[string]int64, opts ...dbguard.Option) (*dbguard.Guard, string) {
	t.Helper()
	table := tableName(t, db)
	g := mustNew(dbguard.New(db, append([]dbguard.Option{dbguard.WithTable(table)}, opts...)...))
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx := ctxFor(t, 30*time.Second)
	if err := g.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for sku, n := range stock {
		if err := g.Restock(ctx, sku, n); err != nil {
			t.Fatal(err)
		}
	}
	return g, table
}

// testLocker returns a lock client on the shared Redis when it answers —
// in-process miniredis under the race detector would be the bottleneck of
// hundreds of buyers queueing on one lock — and on miniredis otherwise (or,
// with LATCHKEY_REQUIRE_SERVERS=1, fails when the shared Redis is missing).
func testLocker(t testing.TB, opts ...core.Option) *core.Client {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = redistest.DefaultAddr
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		if redistest.Require() {
			redistest.Unavailable(t, "no Redis answers at %s: %v", addr, err)
		}
		return miniLocker(t, opts...)
	}
	prefix := "dbguard-test-" + rand.Text()[:10]
	c := mustNew(core.NewRedis(rdb, append([]core.Option{core.WithKeyPrefix(prefix)}, opts...)...))
	t.Cleanup(func() {
		c.Close()
		deletePrefix(t, rdb, prefix)
		rdb.Close()
	})
	return c
}

// deletePrefix deletes the keys under prefix that a test left on a shared
// Redis (fence counters, versioned values).
func deletePrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Logf("delete %s: %v", iter.Val(), err)
			return
		}
	}
	if err := iter.Err(); err != nil {
		t.Logf("scan %s: %v", prefix, err)
	}
}

// miniLocker returns a lock client on a fresh miniredis whose clock runs.
func miniLocker(t testing.TB, opts ...core.Option) *core.Client {
	t.Helper()
	mr := miniredis.RunT(t)
	stop := mrclock.Run(mr)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	c := mustNew(core.NewRedis(rdb, opts...))
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
		stop()
	})
	return c
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustStock reads the stock of sku.
func mustStock(t testing.TB, g *dbguard.Guard, sku string) int64 {
	t.Helper()
	n, err := g.Stock(ctxFor(t, 10*time.Second), sku)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
