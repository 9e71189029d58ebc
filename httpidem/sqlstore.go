package httpidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// A SQLStore is an IdempotencyStore and a ClaimCounter on a SQL database —
// PostgreSQL, MySQL/MariaDB or SQLite — through database/sql, for a
// service that has a database and no Redis. In-flight leases, stored
// responses and daily claims are rows of two tables (Migrate creates
// them; DDL shows them), and every expiry is judged by the database's
// clock, never the client's. A lease is renewed every third of its TTL
// while held and is lost, as a core lock is, when a renewal finds it gone
// or none succeeds in time. CountApprox counts exactly here.
//
// With WithHandlerTx, a request that owns its key runs in a transaction
// that its handler gets from TxFromContext, and its response is stored in
// that transaction: see the package documentation ("Transactions").
//
// The store never closes db. It is safe for concurrent use.
type SQLStore struct {
	db        *sql.DB
	dialect   Dialect
	idem      string
	claims    string
	handlerTx bool
	txOpts    *sql.TxOptions
	q         sqlQueries

	mu     sync.Mutex
	leases map[*sqlLease]struct{} // held, so that Close can release them
	closed bool

	writes   atomic.Uint64 // writes since the store was made, to pace sweeps
	sweeping atomic.Bool
	sweeps   sync.WaitGroup
}

var (
	_ IdempotencyStore = (*SQLStore)(nil)
	_ ClaimCounter     = (*SQLStore)(nil)
)

// sweepEvery is how many writes a store makes between two sweeps of
// expired rows; a sweep deletes up to sweepBatch rows of each table, more
// than the writes made since the last one can have left behind.
const (
	sweepEvery = 128
	sweepBatch = 256
)

var errStoreClosed = errors.New("store closed")

// NewSQLStore returns a store on db. It does no I/O: create its tables
// with Migrate, or with the statements of DDL in your own migrations. The
// dialect is read from db's driver unless WithDialect names it. A nil db,
// a driver whose dialect cannot be told, or an invalid option is an error
// matching ErrInvalidConfig.
//
// SQLite has one writer at a time: open it with a busy timeout, WAL and,
// with WithHandlerTx, immediate transactions (modernc.org/sqlite:
// "file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"),
// and give the pool at least two connections, since a lease is renewed
// while its handler's transaction holds one.
func NewSQLStore(db *sql.DB, opts ...SQLStoreOption) (*SQLStore, error) {
	cfg := sqlStoreConfig{idem: DefaultIdempotencyTable, claims: DefaultClaimsTable}
	for _, o := range opts {
		if o != nil {
			o.applySQLStore(&cfg)
		}
	}
	switch {
	case cfg.err != nil:
		return nil, cfg.err
	case db == nil:
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	d := cfg.dialect
	if d == DetectDialect {
		if d = driverDialect(db); d == DetectDialect {
			return nil, fmt.Errorf("%w: cannot tell the SQL dialect of driver %T: name it with WithDialect", ErrInvalidConfig, db.Driver())
		}
	}
	return &SQLStore{
		db: db, dialect: d, idem: cfg.idem, claims: cfg.claims,
		handlerTx: cfg.handlerTx, txOpts: cfg.txOpts,
		q:      buildSQLQueries(d, cfg.idem, cfg.claims),
		leases: make(map[*sqlLease]struct{}),
	}, nil
}

// Dialect returns the SQL dialect the store speaks: detected, or named by
// WithDialect.
func (s *SQLStore) Dialect() Dialect { return s.dialect }

// DDL returns the statements that create the store's tables and indexes
// if they do not exist, in its dialect and with its table names: Migrate
// runs exactly these, in order. Copy them into your own migrations if
// you prefer.
func (s *SQLStore) DDL() []string { return ddl(s.dialect, s.idem, s.claims) }

// Migrate creates the store's tables and indexes if they do not exist
// (see DDL). It changes nothing that exists. An error matches
// ErrUnavailable.
func (s *SQLStore) Migrate(ctx context.Context) error {
	for _, stmt := range s.DDL() {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return storeErr("migrate", err)
		}
	}
	return nil
}

// DeleteExpired deletes the rows of both tables whose time is up —
// responses past their RecordTTL, leases whose holder died, claims past
// their day's end and grace — and returns how many it deleted. The store
// also deletes some as it writes, so calling it is optional: a job may,
// after a quiet period, to keep the tables small. An error matches
// ErrUnavailable.
func (s *SQLStore) DeleteExpired(ctx context.Context) (int64, error) {
	var total int64
	for _, q := range s.q.sweep {
		for {
			n, err := s.sweepOnce(ctx, q)
			if err != nil {
				return total, storeErr("delete expired", err)
			}
			total += n
			if n < sweepBatch {
				break
			}
		}
	}
	return total, nil
}

// wrote counts a write and, every sweepEvery writes, deletes a batch of
// expired rows in the background.
func (s *SQLStore) wrote() {
	if s.writes.Add(1)%sweepEvery != 0 || !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.sweeping.Store(false)
		return
	}
	s.sweeps.Add(1)
	go func() {
		defer s.sweeps.Done()
		defer s.sweeping.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
		defer cancel()
		for _, q := range s.q.sweep {
			_, _ = s.sweepOnce(ctx, q) // best effort: the next sweep tries again
		}
	}()
}

// sweepOnce runs one sweep statement. On MySQL it runs under READ
// COMMITTED, which takes no gap locks: under REPEATABLE READ a range
// DELETE locks the gaps it scans, and could wait on, or deadlock with,
// a handler's transaction inserting its response next to them.
func (s *SQLStore) sweepOnce(ctx context.Context, q string) (int64, error) {
	if s.dialect != MySQL {
		res, err := s.db.ExecContext(ctx, q)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, q)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	return n, tx.Commit()
}

// Close releases the leases the store still holds — their Lost channels
// close, as a core.Client's Close tells its leases — and waits for a
// background sweep to end. It never closes the *sql.DB. After Close,
// Begin fails with ErrUnavailable. Calling it again does nothing.
func (s *SQLStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	held := make([]*sqlLease, 0, len(s.leases))
	for l := range s.leases {
		held = append(held, l)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	for _, l := range held {
		l.lose(errStoreClosed)
		_ = l.Release(ctx)
	}
	s.sweeps.Wait()
	return nil
}

// Begin implements IdempotencyStore. It reads the key's rows: a live
// response is returned, a live lease is in flight (waited for, by
// polling, when a.Wait > 0 and the fingerprints match); otherwise it
// inserts a lease row, or takes over an expired one.
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

// bin returns s as a non-nil byte slice: drivers bind a nil []byte as
// NULL, and an empty object or key part is a value, not NULL.
func bin(s string) []byte { return append(make([]byte, 0, len(s)), s...) }
