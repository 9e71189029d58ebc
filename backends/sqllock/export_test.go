package sqllock

import (
	"context"
	"database/sql"
	"time"
)

// AgeAndCleanup makes every lease row of opts' table look as if it was
// last written an hour and fenceRetention ago — its expiry and its fence
// (a clock reading in µs at most) moved back that much — and runs cleanup
// once. It returns the highest aged fence and how many rows cleanup
// deleted.
func AgeAndCleanup(ctx context.Context, db *sql.DB, opts ...Option) (int64, int64, error) {
	cfg := newConfig(opts)
	d, err := dialectOf(db, cfg.dialect)
	if err != nil {
		return 0, 0, err
	}
	back := fenceRetention + time.Hour
	q := "UPDATE " + cfg.table + " SET expires_ms = expires_ms - ?, fence = fence - ?"
	m := "SELECT MAX(fence) FROM " + cfg.table
	if d == Postgres {
		q = rebind(q)
	}
	if _, err := db.ExecContext(ctx, q, back.Milliseconds(), back.Microseconds()); err != nil {
		return 0, 0, err
	}
	var aged int64
	if err := db.QueryRowContext(ctx, m).Scan(&aged); err != nil {
		return 0, 0, err
	}
	b := &backend{db: db, d: d, q: buildQueries(d, cfg.table)}
	res, err := db.ExecContext(ctx, b.q.cleanup, fenceRetention.Milliseconds())
	if err != nil {
		return 0, 0, err
	}
	n, err := res.RowsAffected()
	return aged, n, err
}

// Postpone sets key's lease to expire d from now by the database clock.
func Postpone(ctx context.Context, db *sql.DB, opt Option, key string, d time.Duration) error {
	cfg := newConfig([]Option{opt})
	dia, err := dialectOf(db, cfg.dialect)
	if err != nil {
		return err
	}
	ms, _ := nowExprs(dia)
	q := "UPDATE " + cfg.table + " SET expires_ms = " + ms + " + ? WHERE name = ?"
	if dia == Postgres {
		q = rebind(q)
	}
	_, err = db.ExecContext(ctx, q, d.Milliseconds(), (&backend{d: dia}).bin("latchkey:{"+key+"}"))
	return err
}

// Cleanup runs the backend's cleanup once, as cleanupLoop does.
func Cleanup(ctx context.Context, db *sql.DB, opts ...Option) error {
	cfg := newConfig(opts)
	d, err := dialectOf(db, cfg.dialect)
	if err != nil {
		return err
	}
	b := &backend{db: db, d: d, q: buildQueries(d, cfg.table)}
	return b.cleanup(ctx)
}

// TableOf is the leases table opts name.
func TableOf(opts ...Option) string { return newConfig(opts).table }
