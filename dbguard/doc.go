// Package dbguard deducts stock so that no unit is ever sold twice: a
// deduction takes all the units it asks for or none, qty never goes below
// zero, and the sum of successful deductions always equals the stock that
// left the table — whatever the number of concurrent buyers, processes and
// strategies, and whether Redis is up or not.
//
// The seeds' flash sale: many buyers, one product, one stock row.
// "UPDATE stock SET num = $num" computed from an earlier read loses
// updates and oversells; SELECT ... FOR UPDATE holds connections and
// deadlocks when orders lock several rows in different orders; a Redis lock
// alone is unsafe when its holder pauses past the lease. A Guard offers
// each correct strategy behind one call:
//
//	g, err := dbguard.New(db, dbguard.WithLocks(locks)) // Auto: Locked, Optimistic while Redis is down
//	err = g.Deduct(ctx, "sku-42", 1)                    // nil, ErrInsufficientStock, ErrUnknownSKU, ...
//	err = g.DeductMany(ctx, map[string]int64{"A": 1, "B": 2}) // one transaction, all or nothing
//
// # Strategies
//
//   - Atomic (the default without a locker): UPDATE ... SET qty = qty - n
//     WHERE sku = s AND qty >= n. One statement; the database re-checks the
//     condition on the row it locks. The fastest on every workload we
//     measured.
//   - RowLock: SELECT ... FOR UPDATE, check, UPDATE, in a transaction
//     (BEGIN IMMEDIATE on SQLite). For when the deduction must read the row
//     before deciding, inside the same transaction.
//   - Optimistic: read qty and version, UPDATE ... WHERE version = v, retry
//     with jittered backoff when another writer moved the version —
//     Tair's put(key, value, version). No locks held; cheap when
//     conflicts are rare, wasteful on one hot SKU.
//   - Locked: the core lock of the SKU (Redis), then a fenced conditional
//     UPDATE ... SET qty = qty - n, fence = f WHERE sku = s AND qty >= n AND
//     fence < f, with f the lock's fencing token. Buyers of one SKU queue
//     in Redis instead of in the database; the fence rejects the late write
//     of a holder whose lease expired while it paused, once the next
//     holder has written (ErrStaleFence; the deduction is then retried with
//     a fresh lock). A sold-out SKU is refused before queueing, and buyers
//     already queued are told at once when one of them finds it sold out.
//   - Auto (the default with a locker): Locked, falling back to Optimistic
//     while the lock service fails or does not answer within
//     WithWaitTimeout, and back to Locked when a probe (every
//     WithProbeInterval) gets through. An optimistic deduction that keeps
//     losing races to other buyers ends with one Atomic write. Buyers see
//     no error from the outage.
//
// Every strategy bumps the row's version on every write, so strategies can
// be mixed on one table (Auto does). DeductMany locks and writes SKUs in
// sorted order, in one transaction: two orders touching the same SKUs in
// different orders never deadlock. Transactions that the database aborts
// anyway (deadlock victim, serialization failure, SQLite busy) are run
// again, at most WithRetryBudget times.
//
// # When the answer is lost
//
// A connection can break after the database committed a deduction and
// before its answer came back: a killed session, a failover, a reset, a
// context that ended mid-statement. Reporting that as a failure would
// invite a retry that takes the units twice, so a Guard does not. Under
// Locked the SKU's lock is still held, and the row's fence says whether
// the write committed (it holds the lock's fence only if it did; if not,
// the Guard stores that fence first, so that a write still running on the
// server can no longer apply): the call returns nil or the real failure,
// and Stats.Settled counts it. Otherwise — the other strategies, or a
// Locked deduction whose database stays out of reach for that read — the
// call returns ErrOutcomeUnknown (Stats.OutcomeUnknown,
// OutcomeUnknown to the Observer), wrapping the driver's error. An error
// raised before the statement was sent is an ordinary failure.
//
// Pair every deduction with the order's idempotency key: record the order
// under its key before deducting, then mark it paid on nil or failed on
// an ordinary error. On ErrOutcomeUnknown mark it pending instead, and do
// not deduct for it again: a client retrying with the same key meets the
// pending order, not a second deduction. Settle pending orders out of
// band: the units that left the table, less those of paid orders, are
// what the pending ones took. Under Locked they are rare: the database
// must stay out of reach for the fence read, or the lease lapse and a
// later holder write first.
//
// # The table
//
// Migrate creates it; so can your own migration. In PostgreSQL (names
// configurable with WithTable and WithColumns; Guard.DDL returns the
// statement for the Guard's dialect and names):
//
//	CREATE TABLE IF NOT EXISTS dbguard_stock (
//		sku VARCHAR(255) NOT NULL PRIMARY KEY,
//		qty BIGINT NOT NULL CHECK (qty >= 0),
//		version BIGINT NOT NULL DEFAULT 0,
//		fence BIGINT NOT NULL DEFAULT 0
//	)
//
// In SQLite the types are TEXT and INTEGER. The CHECK constraint is a
// backstop: no strategy ever writes a negative qty.
//
// One SKU is one row, one lock and one fence: SKUs are compared byte for
// byte, as Redis compares lock keys. PostgreSQL's VARCHAR and SQLite's
// TEXT do that; on MySQL and MariaDB the sku column is VARBINARY(255)
// (and so is VersionsInSQL's id), because a VARCHAR takes a collation
// that is case-insensitive by default and PAD SPACE even when binary on
// MariaDB (utf8mb4_bin): "SKU-A", "sku-a" and "SKU-A " would be one row
// under three locks with three fence counters. Migrate never alters an
// existing table, but on MySQL and MariaDB it checks the key column of
// one and returns ErrIncompatibleTable, with the ALTER TABLE ... MODIFY
// statement that converts it, when the column compares otherwise (a table
// created by an earlier version of this package, or by hand). Keep SKUs
// in one spelling: "SKU-A" and "sku-a" are two products. Fences of the core
// lock of a key only grow, so do not switch a table that Redis-locked
// deductions wrote to a core.NewMemory locker (whose fences restart at 1):
// every fenced write would be rejected.
//
// # Dialects
//
// PostgreSQL (github.com/jackc/pgx/v5/stdlib), MySQL 8.0.16+ and MariaDB
// 10.2+ (github.com/go-sql-driver/mysql), SQLite 3.24+
// (modernc.org/sqlite, pure Go), detected from the driver or named with
// WithDialect. SQLite has one writer: open it with a busy timeout and WAL,
// so that concurrent writers wait for each other instead of failing, and
// for write-heavy use give the pool one connection (queueing in Go is far
// cheaper than SQLite's busy sleeps):
//
//	db, err := sql.Open("sqlite", "file:shop.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
//	db.SetMaxOpenConns(1)
//
// A Guard prepares its statements on first use (one round trip each on
// MySQL, no parsing on SQLite); Guard.Close releases them.
//
// # Versioned values
//
// NewVersioned gives the same compare-and-set for data other than stock,
// on a SQL table (VersionsInSQL) or on Redis (VersionsInRedis, one Lua
// script): Get returns a value and its version; Put(key, value, version)
// fails with ErrVersionConflict if the version moved, and with
// ErrOutcomeUnknown if its answer was lost (it may have been written).
package dbguard
