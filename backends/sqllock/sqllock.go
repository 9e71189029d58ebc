package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/sqldialect"
)

// fenceRetention is how long a lease row is kept after its lease expired
// or was released. Cleanup deletes older rows, fence and all; the next
// acquisition of the key writes a new row whose fence is the database
// clock in microseconds, which is above every fence the deleted row gave
// out: each of those was at most the clock (in µs) when it was given, plus
// the acquisitions made within that microsecond, and the row was idle for
// fenceRetention since. So fences rise strictly as long as the database
// clock never steps back by fenceRetention or more.
const fenceRetention = 5 * time.Minute

// New returns a core.Client whose leases are rows of db: PostgreSQL
// (pgx, lib/pq), MySQL or MariaDB (go-sql-driver/mysql) or SQLite
// (modernc.org/sqlite, mattn/go-sqlite3). Create the tables first with
// Migrate (or DDL). The Client declares core.CapClaims and core.CapList
// (cronlock runs on it), and core.CapNotify on PostgreSQL with pgx (see
// WithNotify); it has no fair queueing, semaphores or read-write locks.
// The error is core.ErrInvalidOption for a nil db, a bad option, or a
// driver whose dialect it cannot tell. Closing the Client stops the
// backend's cleanup and listener; it does not close db.
func New(db *sql.DB, opts ...Option) (*core.Client, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqllock: nil *sql.DB", core.ErrInvalidOption)
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	d, err := dialectOf(db, cfg.dialect)
	if err != nil {
		return nil, err
	}
	b := &backend{db: db, d: d, q: buildQueries(d, cfg.table), done: make(chan struct{})}
	if cfg.notify && d == sqldialect.Postgres {
		b.listen = newListener(db, cfg.table)
	}
	c, err := core.New(b, cfg.core...)
	if err != nil {
		return nil, err
	}
	if cfg.cleanup > 0 {
		b.wg.Add(1)
		go b.cleanupLoop(cfg.cleanup)
	}
	return c, nil
}

// backend implements core.Backend on a database.
type backend struct {
	db     *sql.DB
	d      Dialect
	q      queries
	listen *listener // nil: waiters poll

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var (
	_ core.Backend     = (*backend)(nil)
	_ core.Notifier    = (*backend)(nil)
	_ core.Lister      = (*backend)(nil)
	_ core.RecordStore = (*backend)(nil)
)

func (b *backend) Capabilities() core.Capability {
	caps := core.CapClaims | core.CapList
	if b.listen != nil {
		caps |= core.CapNotify
	}
	return caps
}

// row is a lease row as read inside a transaction, with the database
// clock of that moment.
type row struct {
	token, meta  string
	fence, expMs int64
	nowMs, nowUs int64
}

// bin is a name, metadata or record value as a query argument: bytes on
// PostgreSQL, whose BYTEA columns take any byte; a string elsewhere.
func (b *backend) bin(s string) any {
	if b.d == sqldialect.Postgres {
		return []byte(s)
	}
	return s
}

func (r row) held() bool { return r.token != "" && r.expMs > r.nowMs }

// expiry is the expires_ms of a lease or record given ttl at nowMs: one
// millisecond past nowMs+ttl. The clock is read in whole milliseconds
// (truncated on SQLite, rounded on PostgreSQL and MySQL), so a reading of
// nowMs was taken as much as a millisecond after it, and a row whose
// expiry is nowMs+ttl would be free to others up to a millisecond before
// ttl after the request — earlier than the holder, who counts ttl from
// when it sent the request, stops believing it (rule 1 of core.Backend).
// The extra millisecond makes the row free no earlier than ttl after the
// clock was read.
func expiry(nowMs int64, ttl time.Duration) int64 { return nowMs + ttl.Milliseconds() + 1 }

// remaining is the time a row expiring at expMs surely has left at nowMs,
// by the same reckoning: expiry's extra millisecond is not counted.
func remaining(expMs, nowMs int64) time.Duration {
	return time.Duration(max(expMs-nowMs-1, 0)) * time.Millisecond
}

// locked runs fn in a transaction that holds the write lock of name's row,
// and commits if fn returns commit true. A missing row is inserted empty
// first, outside the transaction: inserting it inside would let two
// transactions that both found no row deadlock on InnoDB's gap locks.
func (b *backend) locked(ctx context.Context, lock, insert, name string, fn func(tx *sql.Tx) (commit bool, err error)) error {
	for attempt := 0; ; attempt++ {
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, lock, b.bin(name))
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		if n == 0 && attempt == 0 {
			_ = tx.Rollback()
			if _, err := b.db.ExecContext(ctx, insert, b.bin(name)); err != nil {
				return err
			}
			continue
		}
		if n == 0 { // inserted and deleted at once (cleanup): say so
			_ = tx.Rollback()
			return fmt.Errorf("sqllock: row %q vanished", name)
		}
		commit, err := fn(tx)
		if err != nil || !commit {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

func (b *backend) readRow(ctx context.Context, tx *sql.Tx, name string) (row, error) {
	var r row
	err := tx.QueryRowContext(ctx, b.q.read, b.bin(name)).Scan(&r.token, &r.meta, &r.fence, &r.expMs, &r.nowMs, &r.nowUs)
	return r, err
}

func (b *backend) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	var out core.AcquireResult
	err := b.locked(ctx, b.q.lock, b.q.insert, req.Key, func(tx *sql.Tx) (bool, error) {
		r, err := b.readRow(ctx, tx, req.Key)
		if err != nil {
			return false, err
		}
		switch {
		case r.held() && r.token == req.Token: // re-entry: keep the fence, never shorten
			r.expMs = max(r.expMs, expiry(r.nowMs, req.TTL))
			r.meta = req.Metadata
		case r.held():
			out.HolderTTL = time.Duration(r.expMs-r.nowMs) * time.Millisecond
			return false, nil
		default:
			r.fence = max(r.fence+1, r.nowUs)
			r.token, r.meta, r.expMs = req.Token, req.Metadata, expiry(r.nowMs, req.TTL)
		}
		if _, err := tx.ExecContext(ctx, b.q.write, r.token, b.bin(r.meta), r.fence, r.expMs, b.bin(req.Key)); err != nil {
			return false, err
		}
		out = core.AcquireResult{Acquired: true, Fence: r.fence}
		return true, nil
	})
	if err != nil {
		return core.AcquireResult{}, err
	}
	return out, nil
}

func (b *backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	var left time.Duration
	held := false
	err := b.locked(ctx, b.q.lock, b.q.insert, key, func(tx *sql.Tx) (bool, error) {
		r, err := b.readRow(ctx, tx, key)
		if err != nil {
			return false, err
		}
		if !r.held() || r.token != token {
			return false, nil
		}
		r.expMs = max(r.expMs, expiry(r.nowMs, ttl))
		if _, err := tx.ExecContext(ctx, b.q.write, r.token, b.bin(r.meta), r.fence, r.expMs, b.bin(key)); err != nil {
			return false, err
		}
		held, left = true, remaining(r.expMs, r.nowMs)
		return true, nil
	})
	switch {
	case err != nil:
		return 0, err
	case !held:
		return 0, core.ErrNotHeld
	}
	return left, nil
}

func (b *backend) Release(ctx context.Context, key, token string) (bool, error) {
	res, err := b.db.ExecContext(ctx, b.q.release, b.bin(key), token)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n == 1 && b.listen != nil {
		b.listen.notify(context.WithoutCancel(ctx), key)
	}
	return n == 1, nil
}

func (b *backend) Inspect(ctx context.Context, key string) (core.Info, error) {
	var (
		r   row
		err = b.db.QueryRowContext(ctx, b.q.inspect, b.bin(key)).Scan(&r.token, &r.meta, &r.fence, &r.expMs, &r.nowMs)
	)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return core.Info{}, nil
	case err != nil:
		return core.Info{}, err
	}
	info := core.Info{Fence: r.fence}
	if r.held() {
		info.Held, info.Token, info.Metadata = true, r.token, r.meta
		info.TTL = remaining(r.expMs, r.nowMs)
	}
	return info, nil
}

func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		close(b.done)
		if b.listen != nil {
			b.listen.close()
		}
		b.wg.Wait()
	})
	return nil
}

// Subscribe and Unsubscribe serve core.Notifier with LISTEN/NOTIFY; core
// calls them only when Capabilities says CapNotify (PostgreSQL).
func (b *backend) Subscribe(ctx context.Context, key string, deliver func(string)) error {
	if b.listen == nil {
		return errors.New("sqllock: no notifications on this database")
	}
	return b.listen.subscribe(ctx, key, deliver)
}

func (b *backend) Unsubscribe(key string) {
	if b.listen != nil {
		b.listen.unsubscribe(key)
	}
}

// ListLeases and ListRecords page through the names in order, listPage at
// a time, so that memory stays flat and fn may query the database (a pool
// of one connection included) between pages.
func (b *backend) ListLeases(ctx context.Context, prefix string, fn func(string) bool) error {
	return b.list(ctx, b.q.list, prefix, fn)
}

func (b *backend) ListRecords(ctx context.Context, prefix string, fn func(string) bool) error {
	return b.list(ctx, b.q.recList, prefix, fn)
}

func (b *backend) list(ctx context.Context, q, prefix string, fn func(string) bool) error {
	after := prefix
	for {
		rows, err := b.db.QueryContext(ctx, q, b.bin(after))
		if err != nil {
			return err
		}
		var page []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return err
			}
			page = append(page, name)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, name := range page {
			if !strings.HasPrefix(name, prefix) {
				return nil // names are ordered: past the prefix
			}
			if !fn(name) {
				return nil
			}
		}
		if len(page) < listPage {
			return nil
		}
		after = page[len(page)-1]
	}
}

// cleanupLoop deletes, every interval, lease rows expired longer than
// fenceRetention ago and records expired as long.
func (b *backend) cleanupLoop(every time.Duration) {
	defer b.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		_ = b.cleanup(ctx)
		cancel()
	}
}

// cleanup deletes what cleanupLoop deletes, once.
func (b *backend) cleanup(ctx context.Context) error {
	for _, q := range []string{b.q.cleanup, b.q.recCleanup} {
		if err := b.deleteExpired(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// deleteExpired runs a cleanup DELETE. On MySQL it runs in READ COMMITTED:
// in InnoDB's default REPEATABLE READ, a DELETE that scans the table locks
// every row it reads, live ones included, until it ends — and it ends only
// after the rows other transactions hold are free, so one slow transaction
// stalled every key. In READ COMMITTED it keeps the locks of the rows it
// deletes only.
func (b *backend) deleteExpired(ctx context.Context, q string) error {
	if b.d != sqldialect.MySQL {
		_, err := b.db.ExecContext(ctx, q, fenceRetention.Milliseconds())
		return err
	}
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, q, fenceRetention.Milliseconds()); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
