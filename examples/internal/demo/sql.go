package demo

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL
	_ "modernc.org/sqlite"             // SQLite
)

// SQL opens $DATABASE_URL — postgres:// (PostgreSQL) or mysql:// (MySQL,
// MariaDB) — or, when it is unset, an embedded SQLite file in a temporary
// directory, opened with a busy timeout, WAL and immediate transactions.
// It returns the pool, a description of it, and a cleanup function.
func SQL() (*sql.DB, string, func(), error) {
	if raw := os.Getenv("DATABASE_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, "", nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		var db *sql.DB
		var what string
		switch u.Scheme {
		case "postgres", "postgresql":
			db, err = sql.Open("pgx", raw)
			what = "PostgreSQL at " + u.Redacted()
		case "mysql", "mariadb":
			cfg := mysql.NewConfig()
			cfg.User = u.User.Username()
			cfg.Passwd, _ = u.User.Password()
			cfg.Net, cfg.Addr = "tcp", u.Host
			cfg.DBName = strings.TrimPrefix(u.Path, "/")
			db, err = sql.Open("mysql", cfg.FormatDSN())
			what = "MySQL/MariaDB at " + u.Redacted()
		default:
			return nil, "", nil, fmt.Errorf("DATABASE_URL: scheme %q: want postgres:// or mysql://", u.Scheme)
		}
		if err != nil {
			return nil, "", nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		db.SetMaxOpenConns(8)
		return db, what, func() { db.Close() }, nil
	}
	dir, err := os.MkdirTemp("", "latchkey-demo")
	if err != nil {
		return nil, "", nil, err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "demo.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	db.SetMaxOpenConns(4) // one writer at a time; a few connections for readers and renewals
	return db, "embedded SQLite (set DATABASE_URL for PostgreSQL or MySQL/MariaDB)",
		func() { db.Close(); os.RemoveAll(dir) }, nil
}
