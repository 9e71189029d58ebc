// Package adaptertest runs latchkey's adapters on the Clients of any
// backend, so that each backend's tests show, with the same checks, that
// dbguard, echomw and cronlock work on it unchanged. A backend's test
// calls these with Clients of its own (each as a separate process would
// have it: its own connection to the store).
package adaptertest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/echomw"
	"github.com/robfig/cron/v3"

	_ "modernc.org/sqlite" // SQLiteFile
)

// DbguardLocked runs dbguard's Locked strategy in three processes: each
// has a pool of its own from openStock (all on one database) and a Client
// from newClient. 40 buyers of one unit each, 20 in stock: exactly 20
// sales, every one under the lock, never an oversell. The stock table has
// a name of its own and is dropped when the test ends.
func DbguardLocked(t *testing.T, openStock func(testing.TB) *sql.DB, newClient func(testing.TB) *core.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := "lkt_stock_" + strings.ToLower(rand.Text()[:10])
	var guards []*dbguard.Guard
	for i := range 3 {
		db := openStock(t)
		g, err := dbguard.New(db, dbguard.WithTable(table), dbguard.WithStrategy(dbguard.Locked),
			dbguard.WithLocks(newClient(t)), dbguard.WithWaitTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		if i == 0 {
			t.Cleanup(func() { // after the Guards' Close (cleanups run last first)
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := db.ExecContext(dctx, "DROP TABLE IF EXISTS "+table); err != nil {
					t.Errorf("drop %s: %v", table, err)
				}
			})
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
		wg.Go(func() {
			err := guards[i%3].Deduct(ctx, "sku", 1)
			switch {
			case err == nil:
				sold.Add(1)
			case errors.Is(err, dbguard.ErrInsufficientStock):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
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
	if locked != 20 { // the conditional UPDATE alone would not oversell either
		t.Fatalf("%d sales under the lock, want all 20", locked)
	}
}

// EchoParamLock runs echomw's ParamLock on locks: requests naming the same
// SKU run one at a time (a second one gets 409 at once), another SKU is
// not held up, and a SKU is free again once its request ended.
func EchoParamLock(t *testing.T, locks *core.Client) {
	t.Helper()
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

// Cronlock runs cronlock on three nodes, each a cron.Cron of its own with
// a cronlock.Locker on a Client from newClient (as separate processes
// would have them: each its own connection to the store), all scheduling
// the same one-second job for 4.5 seconds: every tick runs exactly once,
// on one node, and at least three ticks run. newClient's backend must
// declare core.CapClaims (cronlock refuses one that does not at start-up:
// that is an error here).
func Cronlock(t *testing.T, newClient func(testing.TB) *core.Client) {
	t.Helper()
	job := "report-" + strings.ToLower(rand.Text()[:8])
	var mu sync.Mutex
	ran := map[time.Time][]string{}
	var crons []*cron.Cron
	for _, node := range []string{"n1", "n2", "n3"} {
		l, err := cronlock.New(newClient(t), cronlock.WithNodeID(node), cronlock.WithSeconds(), cronlock.WithLocation(time.UTC))
		if err != nil {
			t.Fatalf("cronlock.New on node %s: %v", node, err)
		}
		cr := cron.New(cron.WithSeconds(), cron.WithLocation(time.UTC))
		if _, err := l.AddFunc(cr, "@every 1s", job, func(ctx context.Context) error {
			tk, ok := cronlock.TickFromContext(ctx)
			if !ok {
				t.Errorf("node %s: a run without its tick", node)
			}
			mu.Lock()
			ran[tk.Planned] = append(ran[tk.Planned], node)
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		crons = append(crons, cr)
	}
	for _, cr := range crons {
		cr.Start()
	}
	time.Sleep(4500 * time.Millisecond)
	for _, cr := range crons {
		<-cr.Stop().Done()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) < 3 {
		t.Fatalf("only %d ticks ran in 4.5 s: %v", len(ran), ran)
	}
	for tk, nodes := range ran {
		if len(nodes) != 1 {
			t.Errorf("tick %v ran %d times: %v", tk.Format("15:04:05.000"), len(nodes), nodes)
		}
	}
	t.Logf("ticks and their node: %v", ran)
}

// CronlockRefused checks that cronlock refuses c at start-up when its
// backend has no claims (core.CapClaims), instead of scheduling jobs whose
// ticks could never be claimed. A backend with claims runs Cronlock
// instead.
func CronlockRefused(t *testing.T, c *core.Client) {
	t.Helper()
	if c.Capabilities()&core.CapClaims != 0 {
		t.Fatal("the backend declares core.CapClaims: test cronlock on several nodes instead (Cronlock)")
	}
	l, err := cronlock.New(c)
	if l != nil || !errors.Is(err, core.ErrUnsupported) || !errors.Is(err, cronlock.ErrInvalidOption) {
		t.Fatalf("cronlock.New: %v, %v; want ErrUnsupported and ErrInvalidOption", l, err)
	}
}

// SQLiteFile returns an opener of pools on one new SQLite file (WAL, a
// busy timeout), each closed when the test ends: the stock database of
// DbguardLocked for a backend that has no SQL of its own.
func SQLiteFile(t testing.TB) func(testing.TB) *sql.DB {
	path := filepath.Join(t.TempDir(), "stock.db")
	return func(t testing.TB) *sql.DB {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(2)
		t.Cleanup(func() { db.Close() })
		return db
	}
}
