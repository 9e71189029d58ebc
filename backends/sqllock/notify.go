package sqllock

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// listener serves release notifications on PostgreSQL with pgx: one
// connection LISTENs on the table's channel, a release NOTIFYs the lease's
// name on it (in hex: a payload is text, and a name is any bytes — invalid
// UTF-8 or a NUL failed pg_notify, and the waiters slept until their
// fallback timer), and the listener hands each name to its subscriber.
// The connection is the listener's own, opened with the configuration of
// the pool's connections but outside the pool: holding a pooled one for
// good starved a small pool (with a pool of one, the holder could not
// release the lease its waiter listened for). A lost connection is
// re-established with backoff; notifications sent while it was down are
// lost, and waiters then come back by their own timers.
type listener struct {
	db      *sql.DB
	channel string

	mu      sync.Mutex
	subs    map[string]func(string)
	ready   chan struct{} // closed while LISTEN is in effect
	started bool
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// newListener returns a listener for db if its driver is pgx, else nil.
func newListener(db *sql.DB, table string) *listener {
	if reflect.TypeOf(db.Driver()) != reflect.TypeOf(&stdlib.Driver{}) {
		return nil
	}
	return &listener{db: db, channel: table, subs: map[string]func(string){}, ready: make(chan struct{})}
}

// subscribeWait bounds how long Subscribe waits for LISTEN to take effect.
const subscribeWait = 2 * time.Second

func (l *listener) subscribe(ctx context.Context, key string, deliver func(string)) error {
	l.mu.Lock()
	l.subs[key] = deliver
	if !l.started {
		l.started = true
		lctx, cancel := context.WithCancel(context.Background())
		l.stop = cancel
		l.wg.Add(1)
		go l.run(lctx)
	}
	ready := l.ready
	l.mu.Unlock()
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("sqllock: LISTEN did not take effect in time")
	}
}

func (l *listener) unsubscribe(key string) {
	l.mu.Lock()
	delete(l.subs, key)
	l.mu.Unlock()
}

// notify announces the release of key (best effort, bounded).
func (l *listener) notify(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, _ = l.db.ExecContext(ctx, "SELECT pg_notify($1, $2)", l.channel, hex.EncodeToString([]byte(key)))
}

func (l *listener) close() {
	l.mu.Lock()
	stop := l.stop
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	l.wg.Wait()
}

// run keeps a LISTEN connection until ctx ends.
func (l *listener) run(ctx context.Context) {
	defer l.wg.Done()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := l.session(ctx)
		l.mu.Lock()
		select {
		case <-l.ready: // was listening: not any more
			l.ready = make(chan struct{})
		default:
		}
		l.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 50 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// session LISTENs on a connection of its own and delivers until it fails
// or ctx ends.
func (l *listener) session(ctx context.Context) error {
	cfg, err := l.config(ctx)
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	if _, err := c.Exec(ctx, `LISTEN "`+l.channel+`"`); err != nil {
		return err
	}
	l.mu.Lock()
	close(l.ready)
	l.mu.Unlock()
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		key, err := hex.DecodeString(n.Payload)
		if err != nil {
			continue // not ours
		}
		l.mu.Lock()
		deliver := l.subs[string(key)]
		l.mu.Unlock()
		if deliver != nil {
			deliver("")
		}
	}
}

// config reads the connection configuration of db's pool, borrowing one
// of its connections for a moment.
func (l *listener) config(ctx context.Context) (*pgx.ConnConfig, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("sqllock: not a pgx connection")
		}
		cfg = pc.Conn().Config() // a copy
		// The copy's handler buffers the pooled connection's
		// notifications: let pgx install the new connection's own.
		cfg.OnNotification = nil
		return nil
	})
	return cfg, err
}
