// Command admin runs a small inventory service with latchkey's admin page
// mounted, and prints its URL: buyers deduct stock under a lock per SKU
// (fenced writes), exports share a two-permit semaphore, a scheduler
// leads by election, a cronlock job restocks every few seconds — and one
// buyer hangs while it holds "sku:kettle", so the buyers behind it wait.
//
// Open the page, find sku:kettle with its waiters, and press Release: the
// hung buyer is told it lost the lock at its next renewal, and its late
// write, fenced with the evicted fence, is rejected by the stock store.
// The program prints both. The same is done from a terminal with
//
//	go run ./cmd/latchkey release --force --redis <the printed Redis URL> --prefix admin-demo sku:kettle
//
// It runs until interrupted (^C), or for -for when given. make demo runs
// it with -for 5s; and when its output is not a terminal (a pipe, a CI
// log) and -for is not given, it stops after 10 s, so that no unattended
// run hangs (-for 0 keeps it running).
//
//	cd examples && go run ./admin                       # embedded miniredis
//	cd examples && go run ./admin -for 30s -addr 127.0.0.1:8080
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./admin
//
// The page is mounted without authentication and served on loopback only;
// a real service wraps admin.Handler in its own authentication (README,
// "The admin page").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/admin"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

var (
	runFor = flag.Duration("for", 0, "stop after this long (0: until interrupted; default: until interrupted on a terminal, else 10s)")
	addr   = flag.String("addr", "127.0.0.1:0", "where the admin page listens (loopback: no authentication here)")
)

// prefix is the demo's key prefix, fixed so that `latchkey --prefix
// admin-demo` sees the same keys; they are deleted at the end.
const prefix = "admin-demo"

func main() {
	env := demo.Start("examples/admin")
	defer env.Close()
	rdb := env.Redis
	defer deleteKeys(rdb)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	forGiven := false
	flag.Visit(func(f *flag.Flag) { forGiven = forGiven || f.Name == "for" })
	switch d := *runFor; {
	case d > 0:
		ctx, stop = context.WithTimeout(ctx, d)
		defer stop()
	case !forGiven && !terminal(os.Stdout):
		fmt.Println("output is not a terminal and -for is not given: stopping after 10s (-for 0: until interrupted)")
		ctx, stop = context.WithTimeout(ctx, 10*time.Second)
		defer stop()
	}

	// One Client for the whole service, with a Recorder so the page can
	// show the leases this process loses.
	rec := admin.NewRecorder(50, nil)
	locks, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(rec))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	mux := http.NewServeMux()
	mux.Handle("/debug/latchkey/", admin.Handler(locks, admin.WithWrites(), admin.WithRecorder(rec),
		admin.WithTitle("inventory demo"), admin.WithRefresh(time.Second)))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	fmt.Printf("admin page: http://%s/debug/latchkey/\n", ln.Addr())
	if c, ok := rdb.(*redis.Client); ok {
		fmt.Printf("from the repository root: go run ./cmd/latchkey locks --redis redis://%s --prefix %s\n", c.Options().Addr, prefix)
	}

	store := newStore(map[string]int64{"sku:kettle": 40, "sku:mug": 200, "sku:teapot": 80})
	var wg sync.WaitGroup
	wg.Go(func() { hungBuyer(ctx, locks, store) })
	time.Sleep(50 * time.Millisecond)                                   // buyer-7 takes the kettle first
	wg.Go(func() { buyer(ctx, locks, store, "buyer-1", "sku:kettle") }) // waits behind buyer-7
	for i := range 3 {
		wg.Go(func() { buyer(ctx, locks, store, fmt.Sprintf("buyer-%d", i+2), "sku:kettle", "sku:mug", "sku:teapot") })
	}
	for i := range 3 {
		wg.Go(func() { exporter(ctx, locks, fmt.Sprintf("tenant-%d", i+1)) })
	}
	wg.Go(func() { scheduler(ctx, locks) })
	c, err := restocker(locks, store)
	if err != nil {
		log.Fatal(err)
	}
	c.Start()

	<-ctx.Done()
	<-c.Stop().Done()
	wg.Wait()
	fmt.Println("stock left:", store.snapshot())
}

// hungBuyer takes sku:kettle and hangs (a stuck downstream call, a
// deadlock): its process is alive, so the watchdog keeps renewing the
// lease and nobody else gets the kettle — until an operator force-releases
// it. Then Lost closes at the next renewal, and the write it finally makes
// carries the evicted fence, which the store rejects.
func hungBuyer(ctx context.Context, locks *core.Client, store *store) {
	lk, err := locks.Lock(ctx, "sku:kettle", core.WithTTL(6*time.Second), core.WithFair(),
		core.WithMetadata("buyer-7 · waiting on the payment gateway (hung)"))
	if err != nil {
		return
	}
	defer lk.Release(context.WithoutCancel(ctx))
	fmt.Printf("buyer-7 holds sku:kettle with fence %d and hangs; the other buyers queue behind it\n", lk.Fence())
	select {
	case <-ctx.Done():
		return
	case <-lk.Lost():
	}
	fmt.Printf("buyer-7 was told: %v\n", lk.Err())
	// The hung call returns at last, and the buyer writes anyway.
	if err := store.deduct("sku:kettle", 1, lk.Fence()); err != nil {
		fmt.Printf("buyer-7's late write with fence %d: %v\n", lk.Fence(), err)
	} else {
		fmt.Printf("buyer-7's late write with fence %d was accepted: no later holder had written yet\n", lk.Fence())
	}
}

// buyer deducts one unit of one of skus under its lock, again and again.
func buyer(ctx context.Context, locks *core.Client, store *store, name string, skus ...string) {
	for ctx.Err() == nil {
		sku := skus[rand.IntN(len(skus))]
		err := locks.Do(ctx, sku, func(ctx context.Context) error {
			fence, _ := core.FenceFromContext(ctx)
			pause(ctx, 100+rand.IntN(400)) // reading, pricing, charging
			return store.deduct(sku, 1, fence)
		}, core.WithMetadata(name), core.WithFair(), core.WithWaitTimeout(30*time.Second)) // fair: first come, first served
		if err != nil && ctx.Err() == nil && !errors.Is(err, core.ErrNotAcquired) {
			fmt.Printf("%s: %s: %v\n", name, sku, err)
		}
		pause(ctx, 200+rand.IntN(800))
	}
}

// exporter runs exports, at most two at once across the fleet.
func exporter(ctx context.Context, locks *core.Client, tenant string) {
	exports := locks.Semaphore("exports", 2)
	for ctx.Err() == nil {
		_ = exports.Do(ctx, func(ctx context.Context) error {
			pause(ctx, 1000+rand.IntN(2000))
			return nil
		}, core.WithMetadata(tenant), core.WithWaitTimeout(30*time.Second))
		pause(ctx, 500+rand.IntN(1500))
	}
}

// scheduler leads the "scheduler" election until the end.
func scheduler(ctx context.Context, locks *core.Client) {
	lead, err := locks.Campaign(ctx, "scheduler", "node-a · 10.0.4.17:8080")
	if err != nil {
		return
	}
	defer lead.Release(context.WithoutCancel(ctx))
	select {
	case <-ctx.Done():
	case <-lead.Lost():
	}
}

// restocker adds stock every 3 s, once per tick across the fleet.
func restocker(locks *core.Client, store *store) (*cron.Cron, error) {
	l, err := cronlock.New(locks, cronlock.WithNodeID("node-a"), cronlock.WithLogger(cron.DiscardLogger))
	if err != nil {
		return nil, err
	}
	c := cron.New(cron.WithSeconds())
	_, err = l.AddFunc(c, "@every 3s", "restock", func(ctx context.Context) error {
		return locks.Do(ctx, "sku:mug", func(ctx context.Context) error {
			fence, _ := core.FenceFromContext(ctx) // the SKU's own fence, as the buyers' writes
			return store.deduct("sku:mug", -10, fence)
		}, core.WithMetadata("restock"), core.WithWaitTimeout(2*time.Second))
	})
	return c, err
}

func pause(ctx context.Context, ms int) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ms) * time.Millisecond):
	}
}

func terminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// store is the stock: a write carries the fence of the lock it was made
// under, and a fence below the last one seen for the SKU is rejected —
// what dbguard's Locked strategy does in SQL.
type store struct {
	mu    sync.Mutex
	qty   map[string]int64
	fence map[string]int64
}

var errStale = errors.New("rejected: a newer holder has written (stale fence)")

func newStore(qty map[string]int64) *store {
	return &store{qty: qty, fence: map[string]int64{}}
}

func (s *store) deduct(sku string, n, fence int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence[sku] {
		return fmt.Errorf("%w: fence %d, the store has seen %d", errStale, fence, s.fence[sku])
	}
	if s.qty[sku] < n {
		return fmt.Errorf("%s sold out", sku)
	}
	s.qty[sku] -= n
	s.fence[sku] = max(s.fence[sku], fence)
	return nil
}

func (s *store) snapshot() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for k, v := range s.qty {
		out[k] = v
	}
	return out
}

// deleteKeys removes the demo's keys from a real Redis.
func deleteKeys(rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	it := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
	for it.Next(ctx) {
		rdb.Del(ctx, it.Val())
	}
}
