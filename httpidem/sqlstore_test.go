package httpidem_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/httpidem"
)

// fakeDriver is a database/sql driver this package's dialect detection
// does not know. NewSQLStore does no I/O, so it never connects.
type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}

func init() { sql.Register("httpidem-fake", fakeDriver{}) }

func fakeDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("httpidem-fake", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestNewSQLStoreConfig: bad configuration is ErrInvalidConfig at the
// constructor, with no I/O.
func TestNewSQLStoreConfig(t *testing.T) {
	db := fakeDB(t)
	if _, err := httpidem.NewSQLStore(nil, httpidem.WithDialect(httpidem.Postgres)); !errors.Is(err, httpidem.ErrInvalidConfig) {
		t.Fatalf("nil db: %v", err)
	}
	_, err := httpidem.NewSQLStore(db)
	if !errors.Is(err, httpidem.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithDialect") {
		t.Fatalf("unknown driver: %v, want ErrInvalidConfig naming WithDialect", err)
	}
	for name, opt := range map[string]httpidem.SQLStoreOption{
		"unknown dialect":  httpidem.WithDialect(httpidem.Dialect(9)),
		"empty table":      httpidem.WithTables("", "claims"),
		"digit first":      httpidem.WithTables("1idem", "claims"),
		"injection":        httpidem.WithTables("idem; DROP TABLE users", "claims"),
		"quoted":           httpidem.WithTables(`"idem"`, "claims"),
		"two dots":         httpidem.WithTables("a.b.c", "claims"),
		"empty schema":     httpidem.WithTables(".idem", "claims"),
		"too long":         httpidem.WithTables(strings.Repeat("a", 49), "claims"),
		"one table":        httpidem.WithTables("same", "same"),
		"bad claims table": httpidem.WithTables("idem", "claims-table"),
	} {
		if _, err := httpidem.NewSQLStore(db, httpidem.WithDialect(httpidem.SQLite), opt); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	s, err := httpidem.NewSQLStore(db, httpidem.WithDialect(httpidem.MySQL), httpidem.WithTables("shop.idem", "shop.claims"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dialect() != httpidem.MySQL {
		t.Fatalf("Dialect() = %v", s.Dialect())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSQLStoreDDL: the statements Migrate runs, per dialect: byte-exact
// key columns, an index on the expiry, the configured names.
func TestSQLStoreDDL(t *testing.T) {
	db := fakeDB(t)
	for _, c := range []struct {
		d    httpidem.Dialect
		want []string
	}{
		{httpidem.Postgres, []string{"CREATE TABLE IF NOT EXISTS shop.idem (", "idem_key BYTEA NOT NULL", "response BYTEA,",
			"PRIMARY KEY (idem_key, kind)", "CREATE INDEX IF NOT EXISTS idem_expires ON shop.idem (expires_ms)",
			"CREATE TABLE IF NOT EXISTS shop.claims (", "PRIMARY KEY (scope, claim_day, object, kind, subject)",
			"CREATE INDEX IF NOT EXISTS claims_expires ON shop.claims (expires_ms)"}},
		{httpidem.MySQL, []string{"idem_key VARBINARY(1000) NOT NULL", "response LONGBLOB,", "subject VARBINARY(256) NOT NULL",
			"KEY expires_ms_idx (expires_ms)", ") ENGINE=InnoDB"}},
		{httpidem.SQLite, []string{"idem_key BLOB NOT NULL", "expires_ms INTEGER NOT NULL",
			"CREATE INDEX IF NOT EXISTS shop.idem_expires ON idem (expires_ms)"}},
	} {
		s, err := httpidem.NewSQLStore(db, httpidem.WithDialect(c.d), httpidem.WithTables("shop.idem", "shop.claims"))
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(s.DDL(), ";\n")
		for _, w := range c.want {
			if !strings.Contains(all, w) {
				t.Errorf("%v DDL lacks %q:\n%s", c.d, w, all)
			}
		}
	}
}

func TestDialectString(t *testing.T) {
	for d, want := range map[httpidem.Dialect]string{
		httpidem.DetectDialect: "detect", httpidem.Postgres: "postgres", httpidem.MySQL: "mysql",
		httpidem.SQLite: "sqlite", httpidem.Dialect(7): "Dialect(7)",
	} {
		if got := d.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(d), got, want)
		}
	}
}

// TestTxFromContext: only a request in a transaction has one.
func TestTxFromContext(t *testing.T) {
	if tx, ok := httpidem.TxFromContext(context.Background()); ok || tx != nil {
		t.Fatalf("TxFromContext(Background) = %v, %v", tx, ok)
	}
}

// TestSQLStoreArguments: bad arguments are ErrInvalidArgument before any
// I/O (the fake driver cannot connect).
func TestSQLStoreArguments(t *testing.T) {
	s, err := httpidem.NewSQLStore(fakeDB(t), httpidem.WithDialect(httpidem.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Begin(ctx, httpidem.BeginArgs{Key: "", LeaseTTL: 1}); !errors.Is(err, httpidem.ErrInvalidArgument) {
		t.Errorf("Begin with an empty key: %v", err)
	}
	if _, err := s.Claim(ctx, httpidem.ClaimArgs{Scope: "vote"}); !errors.Is(err, httpidem.ErrInvalidArgument) {
		t.Errorf("Claim without a subject: %v", err)
	}
	if _, err := s.Count(ctx, "", "", httpidem.Day{}); !errors.Is(err, httpidem.ErrInvalidArgument) {
		t.Errorf("Count without a scope: %v", err)
	}
	if _, err := s.Begin(ctx, httpidem.BeginArgs{Key: "k", Fingerprint: "fp", LeaseTTL: 1e9}); !errors.Is(err, httpidem.ErrUnavailable) {
		t.Errorf("Begin on a database that cannot be reached: %v, want ErrUnavailable", err)
	}
}
