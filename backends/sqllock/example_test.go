package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/latchkey/latchkey/backends/sqllock"
)

// A lock on SQLite: migrate the tables once, then lock as on Redis.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "sqllock")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "locks.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, db); err != nil {
		panic(err)
	}
	locks, err := sqllock.New(db)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	l, err := locks.TryLock(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	_, err = locks.TryLock(ctx, "nightly-report")
	fmt.Println(err)
	fmt.Println(l.Release(ctx))
	// Output:
	// core: lock not acquired: "nightly-report"
	// <nil>
}

// The schema for a migration tool of your own.
func ExampleDDL() {
	stmts, err := sqllock.DDL(sqllock.Postgres, sqllock.WithTable("jobs_locks"))
	if err != nil {
		panic(err)
	}
	for _, s := range stmts {
		fmt.Println(s)
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS jobs_locks (name BYTEA NOT NULL PRIMARY KEY, token VARCHAR(160) NOT NULL, meta BYTEA NOT NULL, fence BIGINT NOT NULL, expires_ms BIGINT NOT NULL, ver BIGINT NOT NULL)
	// CREATE TABLE IF NOT EXISTS jobs_locks_records (name BYTEA NOT NULL PRIMARY KEY, value BYTEA NOT NULL, ord BIGINT NULL, expires_ms BIGINT NOT NULL, ver BIGINT NOT NULL)
}
