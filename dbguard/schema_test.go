package dbguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/dbguard"
)

// variants are three SKUs that a case-insensitive or PAD SPACE collation
// would take for one.
var variants = []string{"SKU-A", "sku-a", "SKU-A "}

// TestOneSKUOneRow: SKUs that differ in case or trailing spaces are
// different rows on every dialect, as they are different locks and fences
// in Redis — also under the Locked strategy, whose fences would otherwise
// race on one row from three counters.
func TestOneSKUOneRow(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		g, _ := newGuard(t, db, nil, strategyOpts(t, dbguard.Locked)...)
		ctx := ctxFor(t, 30*time.Second)
		for i, sku := range variants {
			must(t, g.Restock(ctx, sku, int64(10*(i+1))))
		}
		for i, sku := range variants {
			must(t, g.Deduct(ctx, sku, int64(i+1)))
		}
		for i, sku := range variants {
			if n, want := mustStock(t, g, sku), int64(9*(i+1)); n != want {
				t.Errorf("stock of %q = %d, want %d (rows shared?)", sku, n, want)
			}
		}
		if _, err := g.Stock(ctx, "Sku-A"); !errors.Is(err, dbguard.ErrUnknownSKU) {
			t.Errorf("Stock(Sku-A) = %v, want ErrUnknownSKU", err)
		}
	})
}

// TestVersionedKeysDistinct: the same for Versioned keys in SQL.
func TestVersionedKeysDistinct(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInSQL(db, dbguard.WithTable(tableName(t, db))))))
		ctx := ctxFor(t, 30*time.Second)
		must(t, kv.Migrate(ctx))
		for _, key := range variants {
			if err := kv.Put(ctx, key, []byte(key), 0); err != nil {
				t.Fatalf("create %q: %v (aliased to another key?)", key, err)
			}
		}
		for _, key := range variants {
			if val, v, err := kv.Get(ctx, key); err != nil || string(val) != key || v != 1 {
				t.Errorf("Get(%q) = %q v%d %v", key, val, v, err)
			}
		}
	})
}

// TestMigrateChecksKeyColumn: on MariaDB, Migrate reports an existing
// table whose key column compares case- or trailing-space-insensitively —
// the tables earlier versions created — with ErrIncompatibleTable and the
// ALTER TABLE that fixes it, which then makes Migrate pass.
func TestMigrateChecksKeyColumn(t *testing.T) {
	db := openMySQL(t)
	ctx := ctxFor(t, 60*time.Second)
	for _, c := range []struct {
		typ string
		ok  bool
	}{
		{"VARCHAR(255)", false}, // the database's default collation, _ci
		{"VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", false}, // PAD SPACE on MariaDB
		{"VARCHAR(255) CHARACTER SET latin1", false},
		{"VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin", true},
		{"VARBINARY(255)", true},
	} {
		t.Run(c.typ, func(t *testing.T) {
			stock, versions := tableName(t, db), tableName(t, db)
			must(t, exec(db, fmt.Sprintf("CREATE TABLE %s (sku %s NOT NULL PRIMARY KEY, qty BIGINT NOT NULL, "+
				"version BIGINT NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0)", stock, c.typ)))
			must(t, exec(db, fmt.Sprintf("CREATE TABLE %s (id %s NOT NULL PRIMARY KEY, data LONGBLOB NOT NULL, "+
				"version BIGINT NOT NULL)", versions, c.typ)))
			g := mustNew(dbguard.New(db, dbguard.WithTable(stock)))
			t.Cleanup(func() { g.Close() })
			kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInSQL(db, dbguard.WithTable(versions)))))
			for name, migrate := range map[string]func() error{
				"Guard":     func() error { return g.Migrate(ctx) },
				"Versioned": func() error { return kv.Migrate(ctx) },
			} {
				err := migrate()
				if c.ok {
					must(t, err)
					continue
				}
				if !errors.Is(err, dbguard.ErrIncompatibleTable) {
					t.Fatalf("%s.Migrate = %v, want ErrIncompatibleTable", name, err)
				}
				_, alter, ok := strings.Cut(err.Error(), "convert it with ")
				if !ok || !strings.HasPrefix(alter, "ALTER TABLE ") {
					t.Fatalf("%s.Migrate: no ALTER TABLE in %q", name, err)
				}
				must(t, exec(db, alter))
				if err := migrate(); err != nil {
					t.Fatalf("%s.Migrate after %s: %v", name, alter, err)
				}
			}
		})
	}
}

// exec runs a statement with a timeout.
func exec(db *sql.DB, query string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, query)
	return err
}

// TestRestockOverflow: a restock that would take the stock past
// math.MaxInt64 is refused with ErrQtyOverflow (an ErrInvalidQty) and
// changes nothing, on every dialect — SQLite would otherwise store the sum
// as a REAL that Stock cannot read back.
func TestRestockOverflow(t *testing.T) {
	eachDB(t, func(t *testing.T, db *sql.DB) {
		g, _ := newGuard(t, db, map[string]int64{"a": math.MaxInt64 - 5, "b": 1})
		ctx := ctxFor(t, 30*time.Second)
		for _, qty := range []int64{6, math.MaxInt64} {
			err := g.Restock(ctx, "a", qty)
			if !errors.Is(err, dbguard.ErrQtyOverflow) || !errors.Is(err, dbguard.ErrInvalidQty) {
				t.Fatalf("Restock(a, %d) over MaxInt64-5: %v, want ErrQtyOverflow", qty, err)
			}
		}
		if n := mustStock(t, g, "a"); n != math.MaxInt64-5 {
			t.Fatalf("stock after refused restocks: %d", n)
		}
		must(t, g.Restock(ctx, "a", 5)) // exactly MaxInt64
		if n := mustStock(t, g, "a"); n != math.MaxInt64 {
			t.Fatalf("stock %d, want MaxInt64", n)
		}
		if err := g.Restock(ctx, "a", 1); !errors.Is(err, dbguard.ErrQtyOverflow) {
			t.Fatalf("Restock(a, 1) at MaxInt64: %v", err)
		}
		must(t, g.Deduct(ctx, "a", 1))
		if err := g.Restock(ctx, "b", math.MaxInt64); !errors.Is(err, dbguard.ErrQtyOverflow) {
			t.Fatalf("Restock(b, MaxInt64) over 1: %v", err)
		}
		must(t, g.Restock(ctx, "new", math.MaxInt64)) // a new row: no sum
		for sku, want := range map[string]int64{"a": math.MaxInt64 - 1, "b": 1, "new": math.MaxInt64} {
			if n := mustStock(t, g, sku); n != want {
				t.Errorf("stock of %s = %d, want %d", sku, n, want)
			}
		}
		if err := g.Restock(ctx, "a", -1); !errors.Is(err, dbguard.ErrInvalidQty) || errors.Is(err, dbguard.ErrQtyOverflow) {
			t.Errorf("Restock(a, -1) = %v, want ErrInvalidQty only", err)
		}
	})
}
