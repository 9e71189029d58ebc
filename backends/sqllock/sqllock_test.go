package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/adaptertest"
	"github.com/latchkey/latchkey/backends/sqllock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
)

// The conformance suite on every database: each subtest's Client has its
// own pool on the test's tables, as separate processes would. On SQLite
// each subtest has a file of its own: its one writer would otherwise make
// the suite's parallel subtests wait on each other, and a first attempt
// that waits out its context is ErrUnavailable, not contention.
func TestConformance(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			opt := table(t, db)
			locktest.Run(t, func(t *testing.T) *core.Client {
				if d.name == "sqlite" {
					db := d.open(t)
					return newClient(t, db, table(t, db))
				}
				return newClient(t, d.open(t), opt)
			})
		})
	}
}

func TestCapabilities(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			c := newClient(t, db, table(t, db))
			want := core.CapClaims | core.CapList
			if d.name == "postgres" {
				want |= core.CapNotify
			}
			if got := c.Capabilities(); got != want {
				t.Fatalf("Capabilities: %s, want %s", got, want)
			}
			if d.name == "postgres" {
				off := newClient(t, db, table(t, db), sqllock.WithNotify(false))
				if off.Capabilities()&core.CapNotify != 0 {
					t.Fatal("WithNotify(false) still notifies")
				}
			}
		})
	}
}

// On PostgreSQL a release in another process wakes a waiter at once: with a
// minute-long lease and a retry budget of 2, only a notification gets the
// waiter in (a poller would spend its budget in a few milliseconds).
func TestNotifyWakesOtherProcess(t *testing.T) {
	db := databases[1].open(t)
	opt := table(t, db)
	a := newClient(t, db, opt)
	b := newClient(t, databases[1].open(t), opt)
	ctx := ctxT(t)
	held, err := a.TryLock(ctx, "notify", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, "notify", core.WithRetryBudget(2), core.WithWaitTimeout(20*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter subscribes and sleeps
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release: %v", err)
	}
}

// Fences keep rising after cleanup deleted a key's row: the new row's
// fence comes from the database clock in microseconds.
func TestFenceAfterCleanup(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			opt := table(t, db)
			c := newClient(t, db, opt, sqllock.WithCleanupEvery(0))
			ctx := ctxT(t)
			var last int64
			for round := 0; round < 3; round++ {
				for range 3 {
					l, err := c.TryLock(ctx, "fenced")
					if err != nil {
						t.Fatal(err)
					}
					if l.Fence() <= last {
						t.Fatalf("round %d: fence %d not above %d", round, l.Fence(), last)
					}
					last = l.Fence()
					if err := l.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				// Make the row as old as the retention and clean up: the row
				// and its counter are gone, and the next fence, read from the
				// clock, must be above the old counter.
				aged, n, err := sqllock.AgeAndCleanup(ctx, db, opt)
				if err != nil || n != 1 {
					t.Fatalf("cleanup deleted %d rows: %v", n, err)
				}
				last = aged
			}
		})
	}
}

// A held key is never taken over because of the client's clock: expiry is
// the database's. A lease whose row says it has a minute left is held,
// whatever the TTL the holder asked for.
func TestExpiryIsTheDatabases(t *testing.T) {
	db := databases[0].open(t)
	opt := table(t, db)
	c := newClient(t, db, opt)
	ctx := ctxT(t)
	l, err := c.TryLock(ctx, "clock", core.WithTTL(150*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Postpone(ctx, db, opt, "clock", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // past the TTL the holder asked for
	if _, err := c.TryLock(ctx, "clock"); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryLock of a key the database says is held: %v", err)
	}
	<-l.Lost() // the holder believes its own TTL, and is told it lost it
}

func TestOptions(t *testing.T) {
	db := databases[0].open(t)
	for name, tc := range map[string]struct {
		db   *sql.DB
		opts []sqllock.Option
	}{
		"nil db":         {nil, nil},
		"bad table":      {db, []sqllock.Option{sqllock.WithTable("1abc")}},
		"quote in table": {db, []sqllock.Option{sqllock.WithTable(`a"b`)}},
		"bad dialect":    {db, []sqllock.Option{sqllock.WithDialect(9)}},
		"negative clean": {db, []sqllock.Option{sqllock.WithCleanupEvery(-time.Second)}},
		"core option":    {db, []sqllock.Option{sqllock.WithClientOptions(core.WithKeyPrefix(""))}},
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := sqllock.New(tc.db, tc.opts...); !errors.Is(err, core.ErrInvalidOption) || c != nil {
				t.Fatalf("New: %v", err)
			}
			if err := sqllock.Migrate(context.Background(), tc.db, tc.opts...); tc.db != nil && name != "core option" && !errors.Is(err, core.ErrInvalidOption) {
				t.Fatalf("Migrate: %v", err)
			}
		})
	}
	if _, err := sqllock.DDL(sqllock.DetectDialect); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("DDL without a dialect: %v", err)
	}
	for _, d := range []sqllock.Dialect{sqllock.Postgres, sqllock.MySQL, sqllock.SQLite} {
		if q, err := sqllock.DDL(d, sqllock.WithTable("jobs_locks")); err != nil || len(q) != 2 {
			t.Fatalf("DDL(%v): %v %v", d, q, err)
		}
	}
}

// The showcase: cronlock on PostgreSQL alone, three nodes, each with its
// own pool and Client; every tick of a one-second job runs exactly once
// (backends/adaptertest, as on every backend).
func TestCronOnPostgres(t *testing.T) {
	db := databases[1].open(t)
	opt := table(t, db)
	adaptertest.Cronlock(t, func(testing.TB) *core.Client {
		return newClient(t, databases[1].open(t), opt)
	})
}

// A backend without claims is refused by cronlock at start-up.
func TestCronRefusesWithoutClaims(t *testing.T) {
	c, err := core.New(noClaims{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adaptertest.CronlockRefused(t, c)
}

type noClaims struct{}

func (noClaims) Capabilities() core.Capability { return 0 }
func (noClaims) Acquire(context.Context, core.AcquireRequest) (core.AcquireResult, error) {
	return core.AcquireResult{}, errors.New("unused")
}
func (noClaims) Extend(context.Context, string, string, time.Duration) (time.Duration, error) {
	return 0, errors.New("unused")
}
func (noClaims) Release(context.Context, string, string) (bool, error) { return false, nil }
func (noClaims) Inspect(context.Context, string) (core.Info, error)    { return core.Info{}, nil }
func (noClaims) Close() error                                          { return nil }
