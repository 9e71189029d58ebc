package sqllock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/echomw"
)

// dbguard's Locked strategy on PostgreSQL alone: the SKU locks are rows of
// the same database as the stock. Three processes, 40 buyers of one unit
// each, 20 in stock: exactly 20 sales, never an oversell.
func TestDbguardLockedOnPostgres(t *testing.T) {
	db := databases[1].open(t)
	opt := table(t, db)
	stockTable := "lkt_stock_" + time.Now().Format("150405")
	ctx := ctxT(t)
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+stockTable) })
	var guards []*dbguard.Guard
	for i := range 3 {
		pool := databases[1].open(t)
		locks := newClient(t, pool, opt)
		g, err := dbguard.New(pool, dbguard.WithTable(stockTable), dbguard.WithStrategy(dbguard.Locked),
			dbguard.WithLocks(locks), dbguard.WithWaitTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		if i == 0 {
			if err := g.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := g.Restock(ctx, "sku", 20); err != nil {
				t.Fatal(err)
			}
		}
		guards = append(guards, g)
	}
	var sold, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := guards[i%3].Deduct(ctx, "sku", 1)
			switch {
			case err == nil:
				sold.Add(1)
			case errors.Is(err, dbguard.ErrInsufficientStock):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	left, err := guards[0].Stock(ctx, "sku")
	if err != nil {
		t.Fatal(err)
	}
	if sold.Load() != 20 || refused.Load() != 20 || left != 0 {
		t.Fatalf("sold %d, refused %d, left %d; want 20, 20, 0", sold.Load(), refused.Load(), left)
	}
}

// echomw's ParamLock on SQLite: requests naming the same SKU run one at a
// time (a second one gets 409 at once), other SKUs are not held up.
func TestEchoParamLockOnSQLite(t *testing.T) {
	db := databases[0].open(t)
	locks := newClient(t, db, table(t, db))
	e := echo.New()
	release := make(chan struct{})
	entered := make(chan string, 4)
	e.POST("/sku/:sku/deduct", func(c echo.Context) error {
		entered <- c.Param("sku")
		<-release
		return c.NoContent(http.StatusNoContent)
	}, echomw.ParamLock(locks, "sku"))
	srv := httptest.NewServer(e)
	defer srv.Close()
	post := func(sku string) int {
		resp, err := http.Post(srv.URL+"/sku/"+sku+"/deduct", "", nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post("a") }()
	<-entered // the first request holds "a"
	if code := post("a"); code != http.StatusConflict {
		t.Fatalf("a second request for the same SKU: %d, want 409", code)
	}
	other := make(chan int, 1)
	go func() { other <- post("b") }()
	if sku := <-entered; sku != "b" {
		t.Fatalf("entered %q, want b", sku)
	}
	close(release)
	if a, b := <-first, <-other; a != http.StatusNoContent || b != http.StatusNoContent {
		t.Fatalf("statuses %d %d, want 204 204", a, b)
	}
	info, err := locks.Inspect(context.Background(), "a")
	if err != nil || info.Held {
		t.Fatalf("the lock of a is still held: %+v %v", info, err)
	}
	_ = core.ErrNotAcquired
}
