package dbguard_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Redis fails in the middle of a flash sale run with Auto (default
// retries): killed (and restarted empty) or paused (and resumed). Buyers
// never see an error but ErrInsufficientStock, nothing is oversold, the sale
// carries on without the lock while Redis is out, and goes back to the lock
// once Redis answers again.
func TestAutoSurvivesRedisOutage(t *testing.T) {
	for _, fault := range []struct {
		name           string
		break_, repair func(s *redistest.Server, t testing.TB)
		dbs            []database
	}{
		{"killed", (*redistest.Server).Kill, (*redistest.Server).Restart, databases},
		// A hung Redis is the same to the database: one suffices.
		{"paused", (*redistest.Server).Pause, (*redistest.Server).Resume, databases[:1]},
	} {
		t.Run(fault.name, func(t *testing.T) {
			t.Parallel()
			eachDBOf(t, fault.dbs, func(t *testing.T, db *sql.DB) {
				srv := redistest.StartServer(t)
				// A short lease, so that leases stranded by the outage (their
				// release could not reach Redis) expire soon after it.
				locker := mustNew(core.NewRedis(srv.Client(t), core.WithTTL(time.Second)))
				t.Cleanup(func() { locker.Close() })
				g, _ := newGuard(t, db, map[string]int64{hotSKU: saleStock},
					dbguard.WithLocks(locker),
					dbguard.WithWaitTimeout(500*time.Millisecond),
					dbguard.WithProbeInterval(100*time.Millisecond))
				outageSale(t, g, func() { fault.break_(srv, t) }, func() {
					fault.repair(srv, t)
					lockerAnswers(t, locker)
				})
			})
		})
	}
}

// lockerAnswers waits until the locker takes a lock again. After a restart
// its connection pool may refuse for a second or so more (go-redis redials
// a pool whose dials failed about once a second); buyers served meanwhile
// go around the lock, and enough of them would sell the stock out before
// the test could see a deduction under the lock again.
func lockerAnswers(t *testing.T, locker *core.Client) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	waitFor(t, ctx, "the locker to answer after the repair", func() bool {
		l, err := locker.TryLock(ctx, "outage-probe")
		if err != nil {
			return false
		}
		return l.Release(ctx) == nil
	})
}

// outageSale runs 500 buyers in three waves around an outage.
func outageSale(t *testing.T, g *dbguard.Guard, breakRedis, repairRedis func()) {
	ctx := ctxFor(t, 90*time.Second)
	var (
		sold, refused atomic.Int64
		mu            sync.Mutex
		failures      []error
	)
	buy := func() {
		err := g.Deduct(ctx, hotSKU, 1)
		switch {
		case err == nil:
			sold.Add(1)
		case errors.Is(err, dbguard.ErrInsufficientStock):
			refused.Add(1)
		default:
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		}
	}
	wave := func(n int, during func()) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() { defer wg.Done(); buy() }()
		}
		if during != nil {
			during()
		}
		wg.Wait()
	}
	buyers := 0

	// Wave 1: 40 buyers; Redis fails once 10 of them were served, with the
	// others queued on the lock or in the middle of their deduction.
	wave(40, func() {
		waitFor(t, ctx, "10 sales before the outage", func() bool { return sold.Load() >= 10 })
		breakRedis()
	})
	buyers += 40
	// Wave 2: 30 buyers while Redis is out.
	before := g.Stats()
	wave(30, nil)
	buyers += 30
	during := g.Stats()
	if during.Fallbacks == before.Fallbacks || during.Locked != before.Locked {
		t.Errorf("deductions went through the lock while Redis was out: before %+v, after %+v", before, during)
	}
	if during.LockOutages == 0 {
		t.Errorf("the outage was not noticed: %+v", during)
	}
	// Redis is back: buyers one by one until one is served under the lock
	// again (the breaker probes every 100 ms).
	repairRedis()
	back := g.Stats().Locked
	waitFor(t, ctx, "a deduction under the lock after Redis recovered", func() bool {
		buy()
		buyers++
		return g.Stats().Locked > back
	})
	// Wave 3: everyone else.
	wave(saleBuyers-buyers, nil)

	mu.Lock()
	defer mu.Unlock()
	for _, err := range failures {
		t.Errorf("a buyer saw: %v", err)
	}
	if sold.Load() != saleStock {
		t.Errorf("sold %d, want exactly %d", sold.Load(), saleStock)
	}
	if left := mustStock(t, g, hotSKU); left != 0 {
		t.Errorf("%d left, want 0", left)
	}
	if refused.Load() != saleBuyers-saleStock {
		t.Errorf("%d buyers refused, want %d", refused.Load(), saleBuyers-saleStock)
	}
	t.Logf("sold %d, refused %d; stats %+v", sold.Load(), refused.Load(), g.Stats())
}

// waitFor polls cond every 20 ms until it holds, failing the test if ctx
// ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// With Redis failing every command from the start, Auto deducts
// optimistically; a buyer who loses every optimistic race (here: the only
// one allowed) ends with one conditional write instead of an error. The
// first stock write is made to lose its race (a trigger ignores it), so
// the fallback is exercised however the buyers are scheduled.
func TestAutoFallbackNeverGivesUp(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.SetError("LOADING Redis is loading the dataset in memory")
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	locker := mustNew(core.NewRedis(rdb))
	t.Cleanup(func() {
		locker.Close()
		rdb.Close()
	})
	const stock, buyers = 100, 300
	db := openSQLite(t)
	g, table := newGuard(t, db, map[string]int64{hotSKU: stock},
		dbguard.WithLocks(locker), dbguard.WithRetryBudget(0), dbguard.WithWaitTimeout(time.Second))
	ctx := ctxFor(t, 60*time.Second)
	for _, q := range []string{
		`CREATE TABLE race (n INTEGER NOT NULL)`,
		`INSERT INTO race VALUES (1)`,
		`CREATE TRIGGER race BEFORE UPDATE ON ` + table + ` WHEN (SELECT n FROM race) > 0
		 BEGIN UPDATE race SET n = n - 1; SELECT RAISE(IGNORE); END`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var sold atomic.Int64
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := g.Deduct(ctx, hotSKU, 1); {
			case err == nil:
				sold.Add(1)
			case !errors.Is(err, dbguard.ErrInsufficientStock):
				t.Errorf("a buyer saw: %v", err)
			}
		}()
	}
	wg.Wait()
	st := g.Stats()
	if sold.Load() != stock || mustStock(t, g, hotSKU) != 0 {
		t.Fatalf("sold %d of %d, %d left", sold.Load(), stock, mustStock(t, g, hotSKU))
	}
	if st.Locked != 0 || st.LockOutages == 0 || st.Atomic == 0 || st.Optimistic+st.Atomic != stock {
		t.Fatalf("want every sale off the lock, some settled by the last-resort Atomic write: %+v", st)
	}
	t.Logf("stats %+v", st)
}
