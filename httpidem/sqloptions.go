package httpidem

import (
	"database/sql"
	"fmt"
)

// The default table names of a SQLStore.
const (
	// DefaultIdempotencyTable keeps in-flight leases and stored responses
	// when WithTables does not name another.
	DefaultIdempotencyTable = "latchkey_idempotency"
	// DefaultClaimsTable keeps daily claims and counts when WithTables
	// does not name another.
	DefaultClaimsTable = "latchkey_claims"
)

// maxTableName is the longest part of a table name: PostgreSQL allows 63
// bytes, and an index is named <table>_expires.
const maxTableName = 48

// A SQLStoreOption configures NewSQLStore. Options are sealed: only this
// package makes them.
type SQLStoreOption interface {
	applySQLStore(*sqlStoreConfig)
}

type sqlStoreConfig struct {
	dialect   Dialect
	idem      string
	claims    string
	handlerTx bool
	txOpts    *sql.TxOptions
	err       error // the first invalid option
}

type sqlStoreOption func(*sqlStoreConfig)

func (f sqlStoreOption) applySQLStore(c *sqlStoreConfig) { f(c) }

func (c *sqlStoreConfig) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
}

// WithDialect names the SQL dialect of the store's database (default
// DetectDialect: read it from the driver). Name it when the driver is one
// NewSQLStore does not know, a wrapper for tracing say.
func WithDialect(d Dialect) SQLStoreOption {
	return sqlStoreOption(func(c *sqlStoreConfig) {
		if d < DetectDialect || d > SQLite {
			c.fail("unknown dialect %d", int(d))
			return
		}
		c.dialect = d
	})
}

// WithTables names the store's two tables (default DefaultIdempotencyTable
// and DefaultClaimsTable): idempotency keeps leases and responses, claims
// keeps daily claims and counts. Each name is an unquoted SQL identifier —
// letters, digits and underscores, not starting with a digit, at most 48
// bytes — optionally qualified by a schema ("shop.idempotency"); it is used
// verbatim, so it must not be a reserved word, and PostgreSQL folds it to
// lower case. The two names must differ.
func WithTables(idempotency, claims string) SQLStoreOption {
	return sqlStoreOption(func(c *sqlStoreConfig) {
		switch {
		case !validTable(idempotency):
			c.fail("table name %q: want [schema.]name of letters, digits and _, each part 1 to %d bytes", idempotency, maxTableName)
		case !validTable(claims):
			c.fail("table name %q: want [schema.]name of letters, digits and _, each part 1 to %d bytes", claims, maxTableName)
		case idempotency == claims:
			c.fail("one table %q for idempotency and claims", claims)
		default:
			c.idem, c.claims = idempotency, claims
		}
	})
}

// WithHandlerTx makes every request that Idempotency runs with this store
// run in a database transaction, begun with opts (nil: the driver's
// defaults) once the request owns its key: the handler gets it from
// TxFromContext and makes its writes in it, and the response is stored in
// the same transaction, which the middleware commits — so the handler's
// writes and the stored response are committed together or not at all.
// See the package documentation ("Transactions") for what this guarantees
// under crashes, and what it changes: the response is held until the
// commit. Default: no transaction; the handler writes as it likes and the
// response is stored after it, on its own.
func WithHandlerTx(opts *sql.TxOptions) SQLStoreOption {
	return sqlStoreOption(func(c *sqlStoreConfig) {
		c.handlerTx = true
		if opts != nil {
			o := *opts
			c.txOpts = &o
		}
	})
}
