// Package sqllock runs latchkey's lock on a SQL database: PostgreSQL,
// MySQL or MariaDB, or SQLite — the "database lock" of the seeds, for a
// service that has a database and no Redis. New returns a *core.Client:
// Lock, TryLock, Do, Campaign, Observe, LockAll, Inspect, Scan and Records
// work as on Redis, and so do the adapters built on them (cronlock runs
// on PostgreSQL alone, each tick on one node).
//
//	db, _ := sql.Open("pgx", os.Getenv("DATABASE_URL"))
//	if err := sqllock.Migrate(ctx, db); err != nil { … }
//	locks, err := sqllock.New(db)
//	…
//	err = locks.Do(ctx, "nightly-report", run)
//
// # How it works
//
// Each key is a row of the leases table (DefaultTable, or WithTable): the
// holder's token and metadata, a fence, and the expiry in milliseconds by
// the database's clock. Every operation is one short transaction that
// takes the row's write lock (an UPDATE, which also serves SQLite), reads
// the row and the database clock, decides, and writes. No session state
// is used — no advisory locks, no locks held between calls — so any
// connection pool works, PgBouncer in transaction mode included.
//
//   - Expiry is judged by the database's clock, never the client's: a
//     lease is free when the database's now passes its expiry. The holder
//     believes it for the TTL from when it sent the request, minus the
//     drift margin, and is told (Lost) before that ends if renewal fails.
//   - Fences: the row's fence becomes max(fence+1, the database clock in
//     µs) at each acquisition, so it rises strictly. A released row is
//     kept; cleanup (WithCleanupEvery) deletes rows expired more than five
//     minutes ago, and the key's next row starts from the clock in µs,
//     above every fence the deleted row gave out — as long as the
//     database clock does not step back by five minutes.
//   - Waiting: on PostgreSQL with pgx, a release NOTIFYs the key on the
//     table's channel, and one connection per Client (its own, beside
//     the pool) LISTENs, so a release wakes waiters in every process at
//     once (WithNotify(false) turns it off). Elsewhere waiters poll
//     from 4 ms, doubling up to 250 ms, jittered, and never sleep past
//     the holder's expiry.
//   - Records and claims (Client.Records, cronlock's ticks) are rows of
//     the records table, judged by the same clock.
//
// Not offered: WithFair, semaphores and read-write locks (core says
// ErrUnsupported, and adapters that need them refuse at start-up), and
// Evict. MySQL's clock is read as UNIX_TIMESTAMP() plus NOW(6)'s
// microseconds, which no session time zone or daylight-saving change
// moves.
//
// SQLite has one writer: open it with a busy timeout and WAL
// (_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)); processes that
// share the file share the locks.
package sqllock
