package sqllock

import (
	"fmt"
	"regexp"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/sqldialect"
)

// A Dialect is the SQL flavour of the database; it is dbguard's and
// httpidem's Dialect type.
type Dialect = sqldialect.Dialect

// The dialects.
const (
	// DetectDialect is the zero Dialect and the default: the dialect is
	// read from the driver (pgx or lib/pq, go-sql-driver/mysql,
	// modernc.org/sqlite or mattn/go-sqlite3). A driver it does not know
	// needs WithDialect.
	DetectDialect = sqldialect.Detect
	Postgres      = sqldialect.Postgres
	MySQL         = sqldialect.MySQL // MySQL and MariaDB
	SQLite        = sqldialect.SQLite
)

// DefaultTable is the table of the leases; the records (Client.Records,
// cronlock's claims) are in DefaultTable + "_records".
const DefaultTable = "latchkey_leases"

// DefaultCleanupEvery is how often a Client deletes lease rows expired
// longer than fenceRetention ago, and expired records (WithCleanupEvery).
const DefaultCleanupEvery = time.Minute

// An Option configures New, Migrate and DDL.
type Option func(*config)

type config struct {
	table   string
	dialect Dialect
	cleanup time.Duration
	notify  bool
	core    []core.Option
	err     error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: sqllock: "+format, append([]any{core.ErrInvalidOption}, args...)...)
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,54}$`)

// WithTable names the leases table (default DefaultTable); the records
// table is its name plus "_records". A name is 1 to 55 ASCII letters,
// digits and underscores, not starting with a digit (ErrInvalidOption).
func WithTable(name string) Option {
	return func(c *config) {
		if !identRE.MatchString(name) {
			c.fail("table name %q: want 1 to 55 letters, digits or _, not starting with a digit", name)
			return
		}
		c.table = name
	}
}

// WithDialect names the dialect when the driver does not tell it.
func WithDialect(d Dialect) Option {
	return func(c *config) {
		if d < DetectDialect || d > SQLite {
			c.fail("unknown dialect %d", int(d))
			return
		}
		c.dialect = d
	}
}

// WithCleanupEvery sets how often the Client deletes rows long expired
// (default DefaultCleanupEvery; 0 turns it off, for a fleet where one
// process cleans up). Negative is ErrInvalidOption.
func WithCleanupEvery(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("negative cleanup interval %v", d)
			return
		}
		c.cleanup = d
	}
}

// WithNotify turns PostgreSQL's LISTEN/NOTIFY on or off (default on with
// the pgx driver). On, a release wakes waiters in every process at once;
// it keeps one connection of its own (beside the pool, with the pool's
// connection settings) open for listening. Off, or on
// another database or driver, waiters poll.
func WithNotify(on bool) Option {
	return func(c *config) { c.notify = on }
}

// WithClientOptions passes options to the core.Client New returns
// (core.WithTTL, core.WithKeyPrefix, core.WithObserver, …).
func WithClientOptions(opts ...core.Option) Option {
	return func(c *config) { c.core = append(c.core, opts...) }
}

func newConfig(opts []Option) config {
	c := config{table: DefaultTable, cleanup: DefaultCleanupEvery, notify: true}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}
