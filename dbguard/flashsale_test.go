package dbguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/dbguard"
)

// The flash sale: 500 buyers want one unit each of a product with 100 in
// stock, while 60 random orders of several SKUs (the hot one among them)
// race them. Exactly the stock is sold, never more, and every unit that
// left the table was paid for by a successful call.
const (
	saleBuyers = 500
	saleStock  = 100
	saleOrders = 60
	hotSKU     = "hot"
)

// saleStocks is the stock before the sale.
var saleStocks = map[string]int64{hotSKU: saleStock, "b": 40, "c": 40, "d": 40}

// saleResult tallies what the buyers were told.
type saleResult struct {
	mu     sync.Mutex
	sold   map[string]int64 // units per SKU, from successful calls
	calls  int64            // successful calls
	errs   map[string]int   // other outcomes, by error class
	sample map[string]error // one error of each class
}

func (r *saleResult) record(order map[string]int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.calls++
		for sku, n := range order {
			r.sold[sku] += n
		}
		return
	}
	class := "other"
	switch {
	case errors.Is(err, dbguard.ErrInsufficientStock):
		class = "insufficient"
	case errors.Is(err, dbguard.ErrBusy):
		class = "busy"
	}
	r.errs[class]++
	if r.sample[class] == nil {
		r.sample[class] = err
	}
}

// runSale runs the buyers and the multi-SKU orders against deduct, all
// released at once.
func runSale(t *testing.T, deduct func(ctx context.Context, order map[string]int64) error) *saleResult {
	t.Helper()
	ctx := ctxFor(t, 4*time.Minute)
	res := &saleResult{sold: map[string]int64{}, errs: map[string]int{}, sample: map[string]error{}}
	orders := make([]map[string]int64, 0, saleBuyers+saleOrders)
	for range saleBuyers {
		orders = append(orders, map[string]int64{hotSKU: 1})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	skus := []string{hotSKU, "b", "c", "d"}
	for range saleOrders {
		o := map[string]int64{}
		for len(o) < 2+rng.IntN(2) {
			o[skus[rng.IntN(len(skus))]] = 1 + rng.Int64N(2)
		}
		orders = append(orders, o)
	}
	rng.Shuffle(len(orders), func(i, j int) { orders[i], orders[j] = orders[j], orders[i] })

	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, o := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res.record(o, deduct(ctx, o))
		}()
	}
	close(start)
	wg.Wait()
	return res
}

// checkSale asserts the invariants of a sale that must not oversell.
func checkSale(t *testing.T, g *dbguard.Guard, res *saleResult) {
	t.Helper()
	if res.errs["busy"] > 0 || res.errs["other"] > 0 {
		t.Errorf("buyers saw errors other than insufficient stock: %v; samples: %v", res.errs, res.sample)
	}
	for sku, before := range saleStocks {
		after := mustStock(t, g, sku)
		if after < 0 {
			t.Errorf("%s: stock %d below zero", sku, after)
		}
		if got := res.sold[sku]; got != before-after {
			t.Errorf("%s: buyers were sold %d units, but stock went from %d to %d", sku, got, before, after)
		}
	}
	if got := res.sold[hotSKU]; got != saleStock {
		t.Errorf("hot SKU: sold %d units, want exactly %d", got, saleStock)
	}
	if left := mustStock(t, g, hotSKU); left != 0 {
		t.Errorf("hot SKU: %d left, want 0", left)
	}
	st := g.Stats()
	if st.Deductions != res.calls {
		t.Errorf("Stats.Deductions = %d, buyers counted %d successes", st.Deductions, res.calls)
	}
	var units int64
	for _, n := range res.sold {
		units += n
	}
	if st.Units != units {
		t.Errorf("Stats.Units = %d, buyers counted %d units", st.Units, units)
	}
	t.Logf("%s: %d calls succeeded (%d units), outcomes %v, stats %+v", g.Strategy(), res.calls, units, res.errs, st)
}

func TestFlashSaleNeverOversells(t *testing.T) {
	strategies := []dbguard.Strategy{dbguard.Atomic, dbguard.RowLock, dbguard.Optimistic, dbguard.Locked, dbguard.Auto}
	eachDBOpen(t, func(t *testing.T, open func(testing.TB) *sql.DB) {
		// The sales of one database run at once, each on its own table and
		// pool: they wait on the database and on Redis far more than they
		// compute, and go test runs only GOMAXPROCS parallel subtests.
		// Each is then checked in its own subtest.
		type sale struct {
			g    *dbguard.Guard
			res  *saleResult
			took time.Duration
		}
		sales := make([]sale, len(strategies))
		var wg sync.WaitGroup
		for i, s := range strategies {
			opts := []dbguard.Option{dbguard.WithStrategy(s)}
			if s == dbguard.Locked || s == dbguard.Auto {
				// 500 buyers queue on one lock: let them wait, so the test
				// checks correctness, not this machine's speed (under -race
				// on a loaded 2-core machine a sale has taken 48 s).
				opts = append(opts, dbguard.WithLocks(testLocker(t)), dbguard.WithWaitTimeout(3*time.Minute))
			}
			if s == dbguard.Optimistic {
				// Every buyer races every other for one row; bound the
				// retries by the sale, not by the default.
				opts = append(opts, dbguard.WithRetryBudget(999))
			}
			g, _ := newGuard(t, open(t), saleStocks, opts...)
			sales[i].g = g
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				defer func() { sales[i].took = time.Since(start) }()
				sales[i].res = runSale(t, func(ctx context.Context, o map[string]int64) error {
					if len(o) == 1 {
						for sku, n := range o {
							return g.Deduct(ctx, sku, n)
						}
					}
					return g.DeductMany(ctx, o)
				})
			}()
		}
		// The naive path is the seeds' "read the stock, write stock - n".
		db := open(t)
		naive, table := newGuard(t, db, map[string]int64{hotSKU: saleStock})
		var claimed atomic.Int64
		ready := newBarrier(saleBuyers)
		ctx := ctxFor(t, 60*time.Second)
		for range saleBuyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := naiveDeduct(ctx, db, table, hotSKU, 1, ready)
				if err != nil {
					t.Error(err)
				}
				if ok {
					claimed.Add(1)
				}
			}()
		}
		wg.Wait()

		for i, s := range strategies {
			t.Run(s.String(), func(t *testing.T) {
				t.Logf("the sale took %v", sales[i].took.Round(time.Millisecond))
				checkSale(t, sales[i].g, sales[i].res)
			})
		}
		// The naive path is expected to oversell: this subtest fails if it
		// does not.
		t.Run("naive read-then-write oversells", func(t *testing.T) {
			n, left := claimed.Load(), mustStock(t, naive, hotSKU)
			t.Logf("naive: %d buyers were told they bought a unit of %d in stock; %d left in the table", n, saleStock, left)
			if n <= saleStock {
				t.Errorf("naive read-then-write sold %d of %d units: expected it to oversell", n, saleStock)
			}
			if n == saleStock-left {
				t.Errorf("naive read-then-write lost no update: expected lost updates")
			}
		})
	})
}

// naiveDeduct is the unsafe pattern the seeds start from: read the stock,
// decide, write back the number computed from the read. Between the read
// and the write every buyer waits at ready until all have read — the think
// time of a real service, made certain so the test is deterministic.
func naiveDeduct(ctx context.Context, db *sql.DB, table, sku string, qty int64, ready *barrier) (bool, error) {
	ph := placeholder(db)
	var have int64
	if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT qty FROM %s WHERE sku = %s", table, ph(1)), sku).Scan(&have); err != nil {
		ready.arrive()
		return false, err
	}
	ready.arrive()
	if err := ready.wait(ctx); err != nil {
		return false, err
	}
	if have < qty {
		return false, nil
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET qty = %s WHERE sku = %s", table, ph(1), ph(2)), have-qty, sku)
	return err == nil, err
}

// placeholder returns the bind parameter syntax of db's driver.
func placeholder(db *sql.DB) func(int) string {
	if fmt.Sprintf("%T", db.Driver()) == "*stdlib.Driver" {
		return func(i int) string { return fmt.Sprintf("$%d", i) }
	}
	return func(int) string { return "?" }
}

// A barrier releases its waiters once n have arrived.
type barrier struct {
	mu   sync.Mutex
	n    int
	done chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, done: make(chan struct{})} }

func (b *barrier) arrive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n--; b.n == 0 {
		close(b.done)
	}
}

func (b *barrier) wait(ctx context.Context) error {
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
