// Package sqldialect tells the SQL flavour of a database/sql pool from its
// driver, without importing any driver. httpidem (SQLStore) and dbguard
// share it, so their Dialect values are one type.
package sqldialect

import (
	"database/sql"
	"reflect"
	"strconv"
	"strings"
)

// A Dialect is the SQL flavour of a database.
type Dialect int

// The dialects; Detect, the zero value, means "read it from the driver".
const (
	Detect Dialect = iota
	Postgres
	MySQL
	SQLite
)

// String returns the dialect's name: "detect", "postgres", "mysql",
// "sqlite", or "Dialect(n)".
func (d Dialect) String() string {
	switch d {
	case Detect:
		return "detect"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// Of names the dialect of db's driver from the package of its type — pgx
// (stdlib) or lib/pq for PostgreSQL, go-sql-driver/mysql for MySQL and
// MariaDB, modernc.org/sqlite or mattn/go-sqlite3 (any package path with
// "sqlite") for SQLite — or Detect when it does not know it (a wrapping
// driver, say).
func Of(db *sql.DB) Dialect {
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return Detect
	}
	switch path := t.PkgPath(); {
	case strings.Contains(path, "jackc/pgx"), strings.Contains(path, "lib/pq"):
		return Postgres
	case strings.Contains(path, "go-sql-driver/mysql"):
		return MySQL
	case strings.Contains(path, "sqlite"):
		return SQLite
	}
	return Detect
}
