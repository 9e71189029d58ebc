package dbguard

import (
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/sqldialect"
)

// Defaults used when no option says otherwise.
const (
	// DefaultTable is the stock table's name when WithTable is not given.
	DefaultTable = "dbguard_stock"
	// DefaultVersionsTable is the table of VersionsInSQL when WithTable is
	// not given.
	DefaultVersionsTable = "dbguard_versions"
	// DefaultWaitTimeout bounds how long a deduction spends getting its SKU
	// locks when WithWaitTimeout is not given.
	DefaultWaitTimeout = 2 * time.Second
	// DefaultProbeInterval is how long Auto deducts optimistically after the
	// lock service failed, before it tries the lock again.
	DefaultProbeInterval = time.Second
	// DefaultRetryBudget bounds the further attempts, after the first, of
	// an optimistic deduction, of a Locked deduction whose fence was
	// rejected, of a transaction the database aborted (deadlock,
	// serialization failure, SQLite busy), and of Versioned.Update.
	DefaultRetryBudget = 31
	// MaxSKULen is the longest SKU (and Versioned key) accepted, in bytes.
	MaxSKULen = 255
	// maxIdentLen is the longest table or column name part accepted.
	maxIdentLen = 63
)

// A Strategy is how a Guard makes a deduction safe. Every strategy is
// correct on its own — none oversells, whatever the concurrency — and they
// may be mixed on one table: every write bumps the row's version.
type Strategy int

const (
	// Auto is the zero Strategy and the default. With a locker (WithLocks)
	// it deducts as Locked and falls back to Optimistic for as long as the
	// lock service is failing or slower than WithWaitTimeout, trying the
	// lock again every WithProbeInterval; an optimistic deduction that
	// loses WithRetryBudget races to other buyers ends with one Atomic write,
	// so buyers never see the outage. Without a locker it is Atomic.
	Auto Strategy = iota
	// Locked takes the core lock of each SKU, then writes with a fenced
	// conditional UPDATE: "qty >= n AND fence < lock fence", storing the
	// fence. A holder whose lease expired while it paused cannot write
	// after the next holder did. Needs WithLocks.
	Locked
	// Optimistic reads qty and version, then writes "WHERE version = v",
	// retrying with jittered backoff when the version moved — Tair's
	// versioned put. No lock and no transaction for one SKU.
	Optimistic
	// RowLock reads the row with SELECT ... FOR UPDATE in a transaction
	// (BEGIN IMMEDIATE on SQLite), checks it and updates it.
	RowLock
	// Atomic is one conditional statement: UPDATE ... WHERE qty >= n.
	Atomic
)

// String returns the strategy's name, e.g. "Locked".
func (s Strategy) String() string {
	switch s {
	case Auto:
		return "Auto"
	case Locked:
		return "Locked"
	case Optimistic:
		return "Optimistic"
	case RowLock:
		return "RowLock"
	case Atomic:
		return "Atomic"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// A Dialect is the SQL flavour of the database; httpidem's Dialect is
// the same type.
type Dialect = sqldialect.Dialect

const (
	// DetectDialect is the zero Dialect and the default: the dialect is
	// read from the *sql.DB's driver — pgx (stdlib) or lib/pq for
	// Postgres, go-sql-driver/mysql for MySQL, modernc.org/sqlite or
	// mattn/go-sqlite3 for SQLite. A driver it does not know (a wrapping
	// driver, for instance) makes every call fail with ErrInvalidOption:
	// name the dialect with WithDialect.
	DetectDialect = sqldialect.Detect
	// Postgres is PostgreSQL (placeholders $1, SELECT ... FOR UPDATE).
	Postgres = sqldialect.Postgres
	// MySQL is MySQL 8.0.16+ or MariaDB 10.2+ with InnoDB.
	MySQL = sqldialect.MySQL
	// SQLite is SQLite 3.24+; transactions use BEGIN IMMEDIATE.
	SQLite = sqldialect.SQLite
)

// Columns names the stock table's columns. An empty field keeps its
// default: "sku", "qty", "version", "fence".
type Columns struct {
	SKU     string // primary key, the SKU (text)
	Qty     string // units in stock, never below zero
	Version string // bumped by every write; Optimistic compares it
	Fence   string // the highest lock fence that wrote; Locked compares it
}

// An Option configures a Guard (New) or a SQL version store
// (VersionsInSQL). Options are sealed: only this package makes them.
type Option interface {
	apply(*config)
}

type option func(*config)

func (f option) apply(c *config) { f(c) }

// optBit records which options were given, so a constructor can refuse the
// ones that mean nothing to it.
type optBit uint

const (
	optTable optBit = 1 << iota
	optDialect
	optOther
)

type config struct {
	locker        *core.Client
	strategy      Strategy
	table         string
	cols          Columns
	dialect       Dialect
	lockTimeout   time.Duration
	probeInterval time.Duration
	retries       int
	observer      Observer
	set           optBit
	err           error // the first invalid option
}

func defaultConfig(table string) config {
	return config{
		table:         table,
		cols:          Columns{SKU: "sku", Qty: "qty", Version: "version", Fence: "fence"},
		lockTimeout:   DefaultWaitTimeout,
		probeInterval: DefaultProbeInterval,
		retries:       DefaultRetryBudget + 1,
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithLocks gives the Guard a lock client for the Locked and Auto
// strategies (default none: Auto is then Atomic, and Locked fails with
// ErrInvalidOption). The SKU lock's key is "dbguard:<table>:<sku>" under the
// client's own key prefix; its TTL and renewal are the client's defaults
// (core.WithTTL, core.WithAutoRenew given to core.NewRedis). Give the client
// a Redis connection with ContextTimeoutEnabled, so WithWaitTimeout also
// bounds a Redis that hangs. A nil client is the same as none.
func WithLocks(c *core.Client) Option {
	return option(func(cfg *config) { cfg.locker = c; cfg.set |= optOther })
}

// WithStrategy picks the strategy (default Auto).
func WithStrategy(s Strategy) Option {
	return option(func(cfg *config) {
		if s < Auto || s > Atomic {
			cfg.fail("unknown strategy %d", int(s))
		}
		cfg.strategy = s
		cfg.set |= optOther
	})
}

// WithTable names the table (default DefaultTable for a Guard,
// DefaultVersionsTable for VersionsInSQL). The name is an unquoted SQL
// identifier — letters, digits and underscores, not starting with a digit,
// at most 63 bytes — optionally qualified by a schema ("shop.stock"). It
// is used verbatim, so it must not be a reserved word; PostgreSQL folds it
// to lower case.
func WithTable(name string) Option {
	return option(func(cfg *config) {
		if !validTable(name) {
			cfg.fail("table name %q: want [schema.]name of letters, digits and _", name)
		}
		cfg.table = name
		cfg.set |= optTable
	})
}

// WithColumns renames the stock table's columns (default sku, qty,
// version, fence); empty fields keep their default. Names follow the rules
// of WithTable, without a schema.
func WithColumns(cols Columns) Option {
	return option(func(cfg *config) {
		for _, p := range []struct {
			dst *string
			v   string
		}{{&cfg.cols.SKU, cols.SKU}, {&cfg.cols.Qty, cols.Qty}, {&cfg.cols.Version, cols.Version}, {&cfg.cols.Fence, cols.Fence}} {
			if p.v == "" {
				continue
			}
			if !validIdent(p.v) {
				cfg.fail("column name %q: want letters, digits and _", p.v)
			}
			*p.dst = p.v
		}
		cfg.set |= optOther
	})
}

// WithDialect names the SQL dialect (default DetectDialect: read it from
// the driver).
func WithDialect(d Dialect) Option {
	return option(func(cfg *config) {
		if d < DetectDialect || d > SQLite {
			cfg.fail("unknown dialect %d", int(d))
		}
		cfg.dialect = d
		cfg.set |= optDialect
	})
}

// WithWaitTimeout bounds how long a Locked or Auto deduction spends getting
// its SKU locks — Redis round trips and waiting for other buyers together
// (default DefaultWaitTimeout, 2 s). When waiting for other buyers runs
// out (after three quarters of it), Locked returns ErrBusy; when Redis
// fails or is still answering when it runs out, Locked returns
// ErrUnavailable. Auto deducts optimistically in both cases, and in the
// second also stops asking Redis for WithProbeInterval.
func WithWaitTimeout(d time.Duration) Option {
	return option(func(cfg *config) {
		if d <= 0 {
			cfg.fail("lock timeout %v: want > 0", d)
		}
		cfg.lockTimeout = d
		cfg.set |= optOther
	})
}

// WithProbeInterval sets how long Auto keeps deducting optimistically after
// the lock service failed, before one deduction tries the lock again
// (default DefaultProbeInterval, 1 s). When that probe succeeds, Auto is
// back on the lock.
func WithProbeInterval(d time.Duration) Option {
	return option(func(cfg *config) {
		if d <= 0 {
			cfg.fail("probe interval %v: want > 0", d)
		}
		cfg.probeInterval = d
		cfg.set |= optOther
	})
}

// WithRetryBudget bounds the further attempts of one deduction after the
// first (default DefaultRetryBudget, 31): optimistic writes that found the
// version moved, Locked writes whose fence was rejected, and transactions
// the database aborted (deadlock, serialization failure, SQLite busy).
// Between attempts the Guard sleeps a jittered, exponentially growing delay
// (from 0.2 ms up to 20 ms). WithRetryBudget(0) makes a single attempt; a
// negative budget is ErrInvalidOption.
func WithRetryBudget(n int) Option {
	return option(func(cfg *config) {
		if n < 0 {
			cfg.fail("retry budget %d: want at least 0", n)
		}
		cfg.retries = n + 1
		cfg.set |= optOther
	})
}

func validTable(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			return validIdent(name[:i]) && validIdent(name[i+1:])
		}
	}
	return validIdent(name)
}

func validIdent(s string) bool {
	if s == "" || len(s) > maxIdentLen || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '_':
		default:
			return false
		}
	}
	return true
}
