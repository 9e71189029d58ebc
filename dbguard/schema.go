package dbguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// keyType is the SQL type of a key column (the SKU, a Versioned key) in
// dialect d. On MySQL and MariaDB it is VARBINARY: a VARCHAR takes the
// table's collation, which is case-insensitive by default and PAD SPACE
// even when binary on MariaDB (utf8mb4_bin), so "SKU-A", "sku-a" and
// "SKU-A " would be one row under three locks. VARBINARY compares bytes,
// as Redis does the lock keys; so do PostgreSQL's VARCHAR and SQLite's
// TEXT.
func keyType(d Dialect) string {
	switch d {
	case MySQL:
		return "VARBINARY(255)"
	case SQLite:
		return "TEXT"
	}
	return "VARCHAR(255)"
}

// checkKeyColumn returns ErrIncompatibleTable if column of table, on
// MySQL or MariaDB, compares other than byte for byte: a character type
// with a case-insensitive, accent-insensitive or PAD SPACE collation, as
// tables created before keyType was VARBINARY have. It never alters the
// table; the error says how to. A column it cannot find is not checked.
// Other dialects compare keys byte for byte whatever the table.
func checkKeyColumn(ctx context.Context, db *sql.DB, d Dialect, table, column string) error {
	if d != MySQL {
		return nil
	}
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		schema, name = "", table
	}
	var dataType, collation string
	err := db.QueryRowContext(ctx, "SELECT DATA_TYPE, COALESCE(COLLATION_NAME, '') FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?",
		schema, name, column).Scan(&dataType, &collation)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dbguard: migrate %s: check column %s: %w", table, column, err)
	}
	if byteExact(collation) {
		return nil
	}
	return fmt.Errorf("%w: %s.%s is %s with collation %s, so keys that differ in case or trailing spaces "+
		"would share a row under different locks; convert it with ALTER TABLE %s MODIFY %s %s NOT NULL",
		ErrIncompatibleTable, table, column, dataType, collation, table, column, keyType(MySQL))
}

// byteExact reports whether a MySQL/MariaDB collation compares strings
// byte for byte: none (a binary string type), "binary", or a binary
// collation without padding (MySQL's utf8mb4_0900_bin, MariaDB's
// *_nopad_bin). Other *_bin collations are PAD SPACE.
func byteExact(collation string) bool {
	c := strings.ToLower(collation)
	return c == "" || c == "binary" || strings.HasSuffix(c, "_nopad_bin") || strings.HasSuffix(c, "_0900_bin")
}
