package httpidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/latchkey/latchkey/internal/sqldialect"
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
		if d = sqldialect.Of(db); d == DetectDialect {
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

// bin returns s as a non-nil byte slice: drivers bind a nil []byte as
// NULL, and an empty object or key part is a value, not NULL.
func bin(s string) []byte { return append(make([]byte, 0, len(s)), s...) }
