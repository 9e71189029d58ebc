package memcachelock_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/echomw"

	_ "modernc.org/sqlite"
)

// The adapters on memcached, unchanged: each test below is one of them on a
// Client of this backend. temporallock is not among them: its module brings
// the Temporal SDK and gRPC, which would nearly double this module's graph
// for a check of one constructor: without core.CapPrimitives its WithLimit
// is refused, as etcdlock's adapters_test.go checks on a backend without it.

// dbguard's Locked strategy with its SKU locks in memcached and its stock
// in a SQLite file: three processes (each a Client on a memcache.Client of
// its own, and a pool of its own on the file), 40 buyers of one unit each,
// 20 in stock: exactly 20 sales, never an oversell.
func TestDbguardLocked(t *testing.T) {
	srv := startServer(t)
	ctx := ctxT(t)
	path := filepath.Join(t.TempDir(), "stock.db")
	var guards []*dbguard.Guard
	for i := range 3 {
		db := openStock(t, path)
		locks := newClient(t, newMC(t, srv))
		g, err := dbguard.New(db, dbguard.WithStrategy(dbguard.Locked), dbguard.WithLocks(locks),
			dbguard.WithWaitTimeout(20*time.Second))
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
	var locked int64
	for _, g := range guards {
		locked += g.Stats().Locked
	}
	if locked != 20 {
		t.Fatalf("%d sales under the lock, want all 20", locked)
	}
}

// openStock opens a pool on the SQLite file at path (each process of a
// test has its own), closed when the test ends.
func openStock(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
}

// echomw's ParamLock: requests naming the same SKU run one at a time (a
// second one gets 409 at once), other SKUs are not held up, and a SKU is
// free again once its request ended.
func TestEchoParamLock(t *testing.T) {
	locks := newClient(t, newMC(t, startServer(t)))
	e := echo.New()
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	entered := make(chan string, 4)
	e.POST("/sku/:sku/deduct", func(c echo.Context) error {
		entered <- c.Param("sku")
		<-release
		return c.NoContent(http.StatusNoContent)
	}, echomw.ParamLock(locks, "sku"))
	hs := httptest.NewServer(e)
	defer hs.Close()
	defer unblock() // before hs.Close: no handler left waiting
	hc := hs.Client()
	defer hc.CloseIdleConnections()
	post := func(sku string) int {
		resp, err := hc.Post(hs.URL+"/sku/"+sku+"/deduct", "", nil)
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
	unblock()
	if a, b := <-first, <-other; a != http.StatusNoContent || b != http.StatusNoContent {
		t.Fatalf("statuses %d %d, want 204 204", a, b)
	}
	if code := post("a"); code != http.StatusNoContent {
		t.Fatalf("a request for a after the first ended: %d, want 204", code)
	}
	info, err := locks.Inspect(context.Background(), "a")
	if err != nil || info.Held {
		t.Fatalf("the lock of a is still held: %+v %v", info, err)
	}
}

// cronlock claims ticks as records (core.CapClaims), which memcached does
// not offer: New refuses the Client at start-up instead of scheduling jobs
// that could never be claimed.
func TestCronlockRefused(t *testing.T) {
	c := newClient(t, newMC(t, startServer(t)))
	if c.Capabilities()&core.CapClaims != 0 {
		t.Fatal("memcachelock declares core.CapClaims: replace this test by a cron test on three nodes")
	}
	l, err := cronlock.New(c)
	if l != nil || !errors.Is(err, core.ErrUnsupported) || !errors.Is(err, cronlock.ErrInvalidOption) {
		t.Fatalf("cronlock.New: %v, %v; want ErrUnsupported and ErrInvalidOption", l, err)
	}
}
