package dbguard

import (
	"fmt"
	"math"
)

// queries are the statements of one Guard, built once by New for its
// dialect, table and column names.
type queries struct {
	ddl        string
	selQty     string // qty by sku
	selQtyVer  string // qty, version by sku
	selDiag    string // qty, fence by sku
	selLocked  string // qty by sku, row-locked (plain on SQLite)
	updAtomic  string // args: n, sku, n
	updFenced  string // args: n, fence, sku, n, fence
	updVersion string // args: n, sku, version, n
	claimFence string // args: fence, sku, fence; no row changed: the row holds that fence or a higher one
	restock    string // args: sku, n (and n again on MySQL); no row changed: the sum would overflow
}

func buildQueries(d Dialect, table string, c Columns) queries {
	t, sku, qty, ver, fence := table, c.SKU, c.Qty, c.Version, c.Fence
	q := queries{
		ddl: ddl(d, t, c),
		selQty: fmt.Sprintf("SELECT %s FROM %s WHERE %s = ?",
			qty, t, sku),
		selQtyVer: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = ?",
			qty, ver, t, sku),
		selDiag: fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = ?",
			qty, fence, t, sku),
		selLocked: fmt.Sprintf("SELECT %s FROM %s WHERE %s = ?%s",
			qty, t, sku, forUpdate(d)),
		updAtomic: fmt.Sprintf("UPDATE %s SET %s = %s - ?, %s = %s + 1 WHERE %s = ? AND %s >= ?",
			t, qty, qty, ver, ver, sku, qty),
		updFenced: fmt.Sprintf("UPDATE %s SET %s = %s - ?, %s = %s + 1, %s = ? WHERE %s = ? AND %s >= ? AND %s < ?",
			t, qty, qty, ver, ver, fence, sku, qty, fence),
		updVersion: fmt.Sprintf("UPDATE %s SET %s = %s - ?, %s = %s + 1 WHERE %s = ? AND %s = ? AND %s >= ?",
			t, qty, qty, ver, ver, sku, ver, qty),
		// The claim leaves qty alone, so it does not bump the version:
		// optimistic deductions in flight need not read again.
		claimFence: fmt.Sprintf("UPDATE %s SET %s = ? WHERE %s = ? AND %s < ?",
			t, fence, sku, fence),
	}
	switch d {
	case MySQL:
		// qty + n past the BIGINT range fails the statement with error
		// 1690, whatever the sql_mode: nothing is written.
		q.restock = fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s) VALUES (?, ?, 1, 0) "+
			"ON DUPLICATE KEY UPDATE %s = %s + ?, %s = %s + 1",
			t, sku, qty, ver, fence, qty, qty, ver, ver)
	default: // Postgres, SQLite 3.24+
		// The WHERE leaves a row whose qty + n would overflow untouched
		// (SQLite would store the sum as a REAL): no row changed.
		q.restock = fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s) VALUES (?, ?, 1, 0) "+
			"ON CONFLICT (%s) DO UPDATE SET %s = %s.%s + excluded.%s, %s = %s.%s + 1 "+
			"WHERE %s.%s <= %d - excluded.%s",
			t, sku, qty, ver, fence, sku, qty, bare(t), qty, qty, ver, bare(t), ver,
			bare(t), qty, int64(math.MaxInt64), qty)
	}
	for _, p := range []*string{&q.selQty, &q.selQtyVer, &q.selDiag, &q.selLocked,
		&q.updAtomic, &q.updFenced, &q.updVersion, &q.claimFence, &q.restock} {
		*p = rebind(d, *p)
	}
	return q
}

// bare is the table name without its schema, as ON CONFLICT's SET clause
// refers to the target row.
func bare(table string) string {
	for i := len(table) - 1; i >= 0; i-- {
		if table[i] == '.' {
			return table[i+1:]
		}
	}
	return table
}

// ddl is the CREATE TABLE statement of the stock table.
func ddl(d Dialect, t string, c Columns) string {
	text, integer := keyType(d), "BIGINT"
	if d == SQLite {
		integer = "INTEGER"
	}
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
		"\t%s %s NOT NULL PRIMARY KEY,\n"+
		"\t%s %s NOT NULL CHECK (%s >= 0),\n"+
		"\t%s %s NOT NULL DEFAULT 0,\n"+
		"\t%s %s NOT NULL DEFAULT 0\n"+
		")",
		t, c.SKU, text, c.Qty, integer, c.Qty, c.Version, integer, c.Fence, integer)
}
