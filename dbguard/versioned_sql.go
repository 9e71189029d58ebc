package dbguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/latchkey/latchkey/internal/sqldialect"
)

// VersionsInSQL returns a VersionStore on a table of db, (id, data,
// version) with id the primary key; Versioned.Migrate creates it. It
// accepts WithTable (default DefaultVersionsTable) and WithDialect
// (default: detected from the driver); any other option, or a nil db,
// makes every call return ErrInvalidOption (ErrNilDB for the db). The DDL,
// in PostgreSQL:
//
//	CREATE TABLE IF NOT EXISTS dbguard_versions (
//		id VARCHAR(255) NOT NULL PRIMARY KEY,
//		data BYTEA NOT NULL,
//		version BIGINT NOT NULL
//	)
//
// (VARBINARY(255) and LONGBLOB on MySQL and MariaDB, so that keys compare
// byte for byte, as they do in PostgreSQL and SQLite; TEXT, BLOB and
// INTEGER on SQLite). Versioned.Migrate reports an existing MySQL table
// whose id column does not as ErrIncompatibleTable. The error is ErrNilDB
// for a nil db, or ErrInvalidOption (options other than WithTable and
// WithDialect, or a dialect that cannot be told).
func VersionsInSQL(db *sql.DB, opts ...Option) (VersionStore, error) {
	cfg := defaultConfig(DefaultVersionsTable)
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	s := &sqlVersions{db: db, table: cfg.table}
	switch {
	case db == nil:
		return nil, ErrNilDB
	case cfg.err != nil:
		return nil, cfg.err
	case cfg.set&^(optTable|optDialect) != 0:
		return nil, fmt.Errorf("%w: VersionsInSQL takes only WithTable and WithDialect", ErrInvalidOption)
	}
	s.d = cfg.dialect
	if s.d == DetectDialect {
		if s.d = sqldialect.Of(db); s.d == DetectDialect {
			return nil, fmt.Errorf("%w: cannot tell the SQL dialect of driver %T: use WithDialect", ErrInvalidOption, db.Driver())
		}
	}
	t := cfg.table
	text, blob, integer := keyType(s.d), "BYTEA", "BIGINT"
	switch s.d {
	case MySQL:
		blob = "LONGBLOB"
	case SQLite:
		blob, integer = "BLOB", "INTEGER"
	}
	s.ddl = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n\tid %s NOT NULL PRIMARY KEY,\n\tdata %s NOT NULL,\n\tversion %s NOT NULL\n)",
		t, text, blob, integer)
	s.selGet = rebind(s.d, "SELECT data, version FROM "+t+" WHERE id = ?")
	s.update = rebind(s.d, "UPDATE "+t+" SET data = ?, version = version + 1 WHERE id = ? AND version = ?")
	s.create = rebind(s.d, "INSERT INTO "+t+" (id, data, version) VALUES (?, ?, 1)")
	if s.d != MySQL {
		s.create += " ON CONFLICT (id) DO NOTHING"
	}
	return s, nil
}

type sqlVersions struct {
	db    *sql.DB
	d     Dialect
	table string

	ddl, selGet, update, create string
}

func (s *sqlVersions) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.ddl); err != nil {
		return fmt.Errorf("dbguard: migrate %s: %w", s.table, err)
	}
	return checkKeyColumn(ctx, s.db, s.d, s.table, "id")
}

func (s *sqlVersions) get(ctx context.Context, key string) ([]byte, int64, bool, error) {
	var (
		val []byte
		ver int64
	)
	err := s.db.QueryRowContext(ctx, s.selGet, key).Scan(&val, &ver)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	if val == nil {
		val = []byte{}
	}
	return val, ver, true, nil
}

func (s *sqlVersions) put(ctx context.Context, key string, value []byte, version int64) (bool, error) {
	var res sql.Result
	var err error
	live := ctx.Err() == nil
	if version == 0 {
		res, err = s.db.ExecContext(ctx, s.create, key, value)
		if duplicateKey(s.d, err) {
			return false, nil
		}
	} else {
		res, err = s.db.ExecContext(ctx, s.update, value, key, version)
	}
	if mayHaveCommitted(live, err) { // the statement commits by itself
		return false, &unknownOutcome{what: fmt.Sprintf("put %q", key), err: err}
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
