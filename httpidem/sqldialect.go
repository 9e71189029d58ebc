package httpidem

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/latchkey/latchkey/internal/sqldialect"
)

// A Dialect is the SQL flavour of a SQLStore's database; dbguard's
// Dialect is the same type.
type Dialect = sqldialect.Dialect

// The dialects.
const (
	// DetectDialect is the zero Dialect and the default: NewSQLStore reads
	// the dialect from the *sql.DB's driver — pgx (stdlib) or lib/pq for
	// PostgreSQL, go-sql-driver/mysql for MySQL and MariaDB,
	// modernc.org/sqlite or mattn/go-sqlite3 for SQLite. A driver it does
	// not know (a wrapping driver, say) is an error: name the dialect with
	// WithDialect.
	DetectDialect = sqldialect.Detect
	// Postgres is PostgreSQL 12 or later.
	Postgres = sqldialect.Postgres
	// MySQL is MySQL 8.0 or later, or MariaDB 10.5 or later, with InnoDB.
	MySQL = sqldialect.MySQL
	// SQLite is SQLite 3.24 or later.
	SQLite = sqldialect.SQLite
)

// nowMillis is the database's clock as milliseconds since the Unix epoch,
// as an SQL expression of dialect d. Every expiry of a SQLStore is judged
// by it, never by the client's clock.
//
// PostgreSQL: clock_timestamp(), the time of the call (NOW() would be the
// start of the transaction, stale in a long one). MySQL: the statement's
// start, as whole seconds from UNIX_TIMESTAMP() plus NOW(3)'s
// milliseconds — UNIX_TIMESTAMP(NOW(3)) would read the local time back
// through the session's zone, ambiguous in the hour a DST change repeats.
// SQLite: julianday('now'), the host's clock (an embedded database has
// no other).
func nowMillis(d Dialect) string {
	switch d {
	case Postgres:
		return "(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT)"
	case MySQL:
		return "(UNIX_TIMESTAMP() * 1000 + FLOOR(MICROSECOND(NOW(3)) / 1000))"
	}
	return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
}

// sqlText turns a query written with ? placeholders and {now} into
// dialect d's: {now} becomes nowMillis(d), and on PostgreSQL ? becomes
// $1, $2, ... The queries of this package have no other question marks.
func sqlText(d Dialect, query string) string {
	query = strings.ReplaceAll(query, "{now}", nowMillis(d))
	if d != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// insertIgnoring is the INSERT of d that does nothing when the primary
// key exists (affecting 0 rows): ON CONFLICT DO NOTHING on PostgreSQL and
// SQLite. MySQL's equivalents are unreliable — INSERT IGNORE downgrades
// other errors too, and ON DUPLICATE KEY UPDATE reports 1 row for a no-op
// under CLIENT_FOUND_ROWS — so there it is a plain INSERT whose duplicate
// key error insertedRows reads as 0 rows.
func insertIgnoring(d Dialect, table, cols, values string) string {
	q := "INSERT INTO " + table + " (" + cols + ") VALUES (" + values + ")"
	if d == MySQL {
		return q
	}
	return q + " ON CONFLICT DO NOTHING"
}

// insertedRows is the number of rows an insertIgnoring statement added:
// 0 when the key existed.
func insertedRows(d Dialect, res sql.Result, err error) (int64, error) {
	if err != nil {
		if d == MySQL && mysqlErrorNumber(err) == 1062 { // ER_DUP_ENTRY
			return 0, nil
		}
		return 0, err
	}
	return res.RowsAffected()
}

// mysqlErrorNumber reads the error number of a go-sql-driver/mysql error
// from its text ("Error 1062 (23000): Duplicate entry ..."), so that this
// package does not import the driver; 0 if err is not one.
func mysqlErrorNumber(err error) int {
	for e := err; e != nil; e = errors.Unwrap(e) {
		rest, ok := strings.CutPrefix(e.Error(), "Error ")
		if !ok {
			continue
		}
		if end := strings.IndexAny(rest, " :"); end > 0 {
			if n, err := strconv.Atoi(rest[:end]); err == nil {
				return n
			}
		}
	}
	return 0
}

// answeredError reports whether err is an error the database server sent
// back — it received the statement and refused it — rather than a lost
// connection or a cancelled context, after which a COMMIT may or may not
// have happened.
func answeredError(d Dialect, err error) bool {
	switch d {
	case Postgres:
		var st interface{ SQLState() string }
		return errors.As(err, &st) && st.SQLState() != ""
	case MySQL:
		return mysqlErrorNumber(err) != 0
	case SQLite:
		var c interface{ Code() int }
		return errors.As(err, &c)
	}
	return false
}

// retryableError reports whether err means the database aborted a
// statement as a whole — a deadlock victim, a serialization failure, a
// lock wait timeout, SQLite busy — so that running it again is safe.
func retryableError(d Dialect, err error) bool {
	switch d {
	case Postgres:
		var st interface{ SQLState() string }
		if errors.As(err, &st) {
			switch st.SQLState() {
			case "40001", "40P01", "55P03":
				return true
			}
		}
	case MySQL:
		switch mysqlErrorNumber(err) {
		case 1205, 1213:
			return true
		}
	case SQLite:
		var c interface{ Code() int }
		if errors.As(err, &c) {
			switch c.Code() & 0xff {
			case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
				return true
			}
		}
	}
	return false
}

// ddl returns the statements that create the tables of a SQLStore in
// dialect d, if they do not exist: Migrate runs them, in order.
func ddl(d Dialect, idem, claims string) []string {
	bin := func(n int) string { // a byte string of at most n bytes, compared byte for byte
		switch d {
		case Postgres:
			return "BYTEA"
		case MySQL:
			return "VARBINARY(" + strconv.Itoa(n) + ")"
		}
		return "BLOB"
	}
	blob, i64, i16, i32 := "BYTEA", "BIGINT", "SMALLINT", "INTEGER"
	switch d {
	case MySQL:
		blob = "LONGBLOB"
	case SQLite:
		blob, i64, i16 = "BLOB", "INTEGER", "INTEGER"
	}
	idemCols := fmt.Sprintf(`idem_key %s NOT NULL,
	kind %s NOT NULL,
	fingerprint %s NOT NULL,
	token %s NOT NULL,
	response %s,
	expires_ms %s NOT NULL,
	version %s NOT NULL DEFAULT 0,
	PRIMARY KEY (idem_key, kind)`,
		bin(maxBeginKey), i16, bin(maxFingerprintLen), bin(tokenBytes*2), blob, i64, i64)
	claimCols := fmt.Sprintf(`scope %s NOT NULL,
	claim_day %s NOT NULL,
	object %s NOT NULL,
	kind %s NOT NULL,
	subject %s NOT NULL,
	token %s NOT NULL,
	counted %s NOT NULL,
	expires_ms %s NOT NULL,
	version %s NOT NULL DEFAULT 0,
	PRIMARY KEY (scope, claim_day, object, kind, subject)`,
		bin(maxScopeLen), i32, bin(maxObjectLen), i16, bin(maxSubjectLen), bin(maxTokenLen), i16, i64, i64)
	if d == MySQL {
		return []string{
			"CREATE TABLE IF NOT EXISTS " + idem + " (\n\t" + idemCols + ",\n\tKEY expires_ms_idx (expires_ms)\n) ENGINE=InnoDB",
			"CREATE TABLE IF NOT EXISTS " + claims + " (\n\t" + claimCols + ",\n\tKEY expires_ms_idx (expires_ms)\n) ENGINE=InnoDB",
		}
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS " + idem + " (\n\t" + idemCols + "\n)",
		createIndex(d, idem),
		"CREATE TABLE IF NOT EXISTS " + claims + " (\n\t" + claimCols + "\n)",
		createIndex(d, claims),
	}
}

// createIndex is the CREATE INDEX of table's expires_ms column, named
// <table>_expires: on PostgreSQL the index lives in its table's schema
// and takes an unqualified name; on SQLite it is the other way round.
func createIndex(d Dialect, table string) string {
	schema, base, ok := strings.Cut(table, ".")
	if !ok {
		schema, base = "", table
	}
	index, on := base+"_expires", table
	if d == SQLite && schema != "" {
		index, on = schema+"."+index, base
	}
	return "CREATE INDEX IF NOT EXISTS " + index + " ON " + on + " (expires_ms)"
}

// validTable reports whether name is [schema.]name, each part an unquoted
// identifier of letters, digits and underscores, not starting with a
// digit, of 1 to maxTableName bytes.
func validTable(name string) bool {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > maxTableName || (p[0] >= '0' && p[0] <= '9') {
			return false
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}
