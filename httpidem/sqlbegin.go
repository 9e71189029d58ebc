package httpidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Begin implements IdempotencyStore. It reads the key's rows: a live
// response is returned, a live lease is in flight (waited for, by
// polling, when a.Wait > 0 and the fingerprints match); otherwise it
// inserts a lease row, or takes over an expired one. A write answered only
// once the lease's TTL (less its drift margin) had passed, counted from
// the send, makes no lease: the row may have expired and been taken over
// meanwhile. That is ErrUnavailable, and the row is deleted if still its.
func (s *SQLStore) Begin(ctx context.Context, a BeginArgs) (Begun, error) {
	if err := checkBegin(a); err != nil {
		return Begun{}, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return Begun{}, storeErr("begin", errStoreClosed)
	}
	var until time.Time
	if a.Wait > 0 {
		until = time.Now().Add(a.Wait)
	}
	for attempt := 0; ; attempt++ {
		b, err := s.beginOnce(ctx, a)
		switch {
		case err != nil && retryableError(s.dialect, err) && attempt < 8:
			// A deadlock victim or busy: run it again.
		case err != nil:
			return Begun{}, err
		case b.InFlight == nil || a.Wait <= 0 || b.InFlight.Fingerprint != a.Fingerprint:
			return b, nil
		case !time.Now().Before(until):
			b.InFlight.TTL = -1
			return b, nil
		}
		if err := pause(ctx, min(pollDelay(attempt), max(time.Until(until), time.Millisecond))); err != nil {
			return Begun{}, storeErr("wait for lease", err)
		}
	}
}

// pollDelay is the pause before look attempt+1 at a key in flight: from
// 5 ms, doubling, up to 100 ms, with jitter.
func pollDelay(attempt int) time.Duration {
	d := 100 * time.Millisecond
	if attempt < 5 {
		d = 5 * time.Millisecond << attempt
	}
	return d/2 + rand.N(d/2+1)
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// beginOnce looks at the key once and takes it if it is free.
func (s *SQLStore) beginOnce(ctx context.Context, a BeginArgs) (Begun, error) {
	key := bin(a.Key)
	// A few rounds: a holder seen a moment ago may be gone when we insert.
	for range 3 {
		rec, inFlight, err := s.look(ctx, key)
		switch {
		case err != nil:
			return Begun{}, err
		case rec != nil:
			return Begun{Record: rec}, nil
		case inFlight != nil:
			return Begun{InFlight: inFlight}, nil
		}
		l, err := s.take(ctx, key, a)
		if err != nil {
			return Begun{}, err
		}
		if l == nil {
			continue
		}
		// A request that completed after we looked must be replayed, not
		// run again.
		rec, err = s.record(ctx, key)
		if err != nil || rec != nil {
			_ = l.Release(ctx)
			return Begun{Record: rec}, err
		}
		if s.handlerTx {
			return Begun{Lease: &sqlTxLease{l}}, nil
		}
		return Begun{Lease: l}, nil
	}
	return Begun{InFlight: &InFlight{Fingerprint: a.Fingerprint, TTL: -1}}, nil
}

// look reads the live rows of key: its stored response, else its lease.
func (s *SQLStore) look(ctx context.Context, key []byte) (*Record, *InFlight, error) {
	rows, err := s.db.QueryContext(ctx, s.q.look, key)
	if err != nil {
		return nil, nil, storeErr("read key", err)
	}
	defer rows.Close()
	var rec *Record
	var inFlight *InFlight
	for rows.Next() {
		var (
			kind     int
			fp, resp []byte
			left     int64
		)
		if err := rows.Scan(&kind, &fp, &resp, &left); err != nil {
			return nil, nil, storeErr("read key", err)
		}
		switch kind {
		case kindRecord:
			if rec, err = decodeRecord(resp); err != nil {
				return nil, nil, storeErr("decode record", err)
			}
		case kindLease:
			inFlight = &InFlight{Fingerprint: string(fp), TTL: time.Duration(left) * time.Millisecond}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, storeErr("read key", err)
	}
	if rec != nil {
		return rec, nil, nil
	}
	return nil, inFlight, nil
}

// record reads the live stored response of key, if any.
func (s *SQLStore) record(ctx context.Context, key []byte) (*Record, error) {
	var resp []byte
	err := s.db.QueryRowContext(ctx, s.q.readRecord, key).Scan(&resp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, storeErr("read record", err)
	}
	rec, err := decodeRecord(resp)
	if err != nil {
		return nil, storeErr("decode record", err)
	}
	return rec, nil
}

// take inserts a lease row for key, or takes over its expired one; nil
// if another request holds the key.
func (s *SQLStore) take(ctx context.Context, key []byte, a BeginArgs) (*sqlLease, error) {
	token := newLeaseToken()
	ttl := a.LeaseTTL.Milliseconds()
	sent := time.Now()
	s.wrote()
	res, err := s.db.ExecContext(ctx, s.q.insertLease, key, bin(a.Fingerprint), token, ttl)
	n, err := insertedRows(s.dialect, res, err)
	if err == nil && n == 0 {
		res, err = s.db.ExecContext(ctx, s.q.takeLease, bin(a.Fingerprint), token, ttl, key)
		if err == nil {
			n, err = res.RowsAffected()
		}
	}
	switch {
	case err != nil:
		return nil, storeErr("take lease", err)
	case n != 1:
		return nil, nil
	}
	if took := time.Since(sent); took >= a.LeaseTTL-leaseMargin(a.LeaseTTL) {
		// The answer came when the lease had no time left: the row may
		// have expired and been taken over before it came, so it makes no
		// lease (as core's TryLock). The row goes, if it is still ours.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completeTimeout)
		defer cancel()
		_, _ = s.db.ExecContext(ctx, s.q.releaseLease, key, token)
		return nil, storeErr("take lease", fmt.Errorf("the answer came %v after the write, past the lease's TTL of %v",
			took.Round(time.Millisecond), a.LeaseTTL))
	}
	return s.hold(key, token, a.LeaseTTL, sent)
}

// hold starts holding a lease whose row was written at sent.
func (s *SQLStore) hold(key, token []byte, ttl time.Duration, sent time.Time) (*sqlLease, error) {
	l := newSQLLease(s, key, token, ttl, sent)
	go l.renew()
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.leases[l] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		l.lose(errStoreClosed)
		ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
		defer cancel()
		_ = l.Release(ctx)
		return nil, storeErr("begin", errStoreClosed)
	}
	return l, nil
}

// forget drops an ended lease from the ones Close releases.
func (s *SQLStore) forget(l *sqlLease) {
	s.mu.Lock()
	delete(s.leases, l)
	s.mu.Unlock()
}
