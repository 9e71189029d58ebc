package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/latchkey/latchkey/core"
)

// Records (core.CapClaims): rows of the records table, read and written in
// a transaction holding the row's write lock, judged by the database clock.

// recRow is a record row's order and expiry, with the database clock.
type recRow struct {
	ord          sql.NullInt64
	expMs, nowMs int64
}

func (r recRow) live() bool { return r.expMs > r.nowMs }

// recordTx runs fn on key's record row, locked; fn returns the row to
// write (value, order, expiry) or nil to write nothing.
func (b *backend) recordTx(ctx context.Context, key string, fn func(r recRow) *recWrite) error {
	return b.locked(ctx, b.q.recLock, b.q.recInsert, key, func(tx *sql.Tx) (bool, error) {
		var r recRow
		if err := tx.QueryRowContext(ctx, b.q.recRead, b.bin(key)).Scan(&r.ord, &r.expMs, &r.nowMs); err != nil {
			return false, err
		}
		w := fn(r)
		if w == nil {
			return false, nil
		}
		if _, err := tx.ExecContext(ctx, b.q.recWrite, b.bin(w.value), w.ord, w.expMs, b.bin(key)); err != nil {
			return false, err
		}
		return true, nil
	})
}

type recWrite struct {
	value string
	ord   sql.NullInt64
	expMs int64
}

func (b *backend) SetRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	return b.recordTx(ctx, key, func(r recRow) *recWrite {
		return &recWrite{value: value, expMs: expiry(r.nowMs, ttl)}
	})
}

func (b *backend) GetRecord(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := b.db.QueryRowContext(ctx, b.q.recGet, b.bin(key)).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return v, true, nil
}

func (b *backend) ClaimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	claimed := false
	err := b.recordTx(ctx, key, func(r recRow) *recWrite {
		if r.live() {
			return nil
		}
		claimed = true
		return &recWrite{value: value, expMs: expiry(r.nowMs, ttl)}
	})
	return claimed && err == nil, err
}

func (b *backend) ClaimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (core.ClaimVerdict, error) {
	verdict := core.ClaimTaken
	dl := planned.UnixMilli() + window.Milliseconds()
	err := b.recordTx(ctx, key, func(r recRow) *recWrite {
		switch {
		case r.live():
			verdict = core.ClaimTaken
			return nil
		case r.nowMs > dl:
			verdict = core.ClaimLate
			return nil
		}
		verdict = core.Claimed
		// Live for ttl, or until just past the window, whichever is later:
		// every claim that arrives by the deadline finds this one.
		return &recWrite{value: value, expMs: max(expiry(r.nowMs, ttl), dl+1)}
	})
	if err != nil {
		return 0, err
	}
	return verdict, nil
}

func (b *backend) SetRecordIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error) {
	stored := false
	err := b.recordTx(ctx, key, func(r recRow) *recWrite {
		if r.live() && r.ord.Valid && r.ord.Int64 > order {
			return nil
		}
		stored = true
		return &recWrite{value: value, ord: sql.NullInt64{Int64: order, Valid: true}, expMs: expiry(r.nowMs, ttl)}
	})
	return stored && err == nil, err
}
