package dbguard

import (
	"errors"
	"strconv"
	"strings"
)

// rebind turns the ? placeholders of query into $1, $2, ... for Postgres.
// The queries of this package contain no other question marks.
func rebind(d Dialect, query string) string {
	if d != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// forUpdate is the locking clause of a SELECT: SQLite has none (its
// transactions take the write lock up front with BEGIN IMMEDIATE).
func forUpdate(d Dialect) string {
	if d == SQLite {
		return ""
	}
	return " FOR UPDATE"
}

// sqlStateOf returns the SQLSTATE of a Postgres error (pgx, lib/pq).
func sqlStateOf(err error) string {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState()
	}
	return ""
}

// sqliteCode returns the (extended) result code of a SQLite error.
func sqliteCode(err error) (int, bool) {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code(), true
	}
	return 0, false
}

// mysqlNumber returns the error number of a go-sql-driver/mysql error,
// read from its message ("Error 1213 (40001): ...") so that this package
// need not import the driver.
func mysqlNumber(err error) int {
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg := e.Error()
		rest, ok := strings.CutPrefix(msg, "Error ")
		if !ok {
			continue
		}
		end := strings.IndexAny(rest, " :")
		if end < 0 {
			continue
		}
		if n, err := strconv.Atoi(rest[:end]); err == nil {
			return n
		}
	}
	return 0
}

// retryable reports whether err means the database aborted the statement
// or transaction as a whole — a deadlock victim, a serialization failure,
// a lock wait timeout, SQLite busy — so that running it again is safe and
// may succeed.
func retryable(d Dialect, err error) bool {
	if err == nil {
		return false
	}
	switch d {
	case Postgres:
		switch sqlStateOf(err) {
		case "40001", "40P01", "55P03":
			return true
		}
	case MySQL:
		switch mysqlNumber(err) {
		case 1205, 1213:
			return true
		}
	case SQLite:
		if c, ok := sqliteCode(err); ok {
			switch c & 0xff {
			case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED and their extended codes
				return true
			}
		}
	}
	return false
}

// duplicateKey reports whether err is a primary-key violation.
func duplicateKey(d Dialect, err error) bool {
	switch d {
	case Postgres:
		return sqlStateOf(err) == "23505"
	case MySQL:
		return mysqlNumber(err) == 1062
	case SQLite:
		c, ok := sqliteCode(err)
		return ok && (c == 1555 || c == 2067) // CONSTRAINT_PRIMARYKEY, CONSTRAINT_UNIQUE
	}
	return false
}
