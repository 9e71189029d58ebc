package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/otel"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	_ "modernc.org/sqlite"
)

// A workload exercises every part of latchkey that package otel measures,
// on three nodes (three core.Clients, as three processes would have) that
// share one Instrumentation. Each Round records at least one measurement
// of every series the dashboard reads.
type workload struct {
	rdb    redis.UniversalClient
	prefix string
	nodes  []*core.Client
	report []cron.Job // one per node: every tick runs on one of them
	export cron.Job   // a job that fails
	store  *httpidem.RedisStore
	orders http.Handler
	votes  http.Handler
	db     *sql.DB
	stock  []*dbguard.Guard // one per strategy
	rounds int

	mu      sync.Mutex
	entered chan struct{} // a slow order has started
	unblock chan struct{} // let it finish
}

// newWorkload sets up the nodes, cron jobs, HTTP middlewares and stock
// guards; every Redis key starts with prefix. It does no I/O but SQLite's.
func newWorkload(rdb redis.UniversalClient, inst *otel.Instrumentation, prefix string) (w *workload, err error) {
	w = &workload{rdb: rdb, prefix: prefix}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	for i := range 3 {
		c, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(inst))
		if err != nil {
			return nil, err
		}
		w.nodes = append(w.nodes, c)
		l, err := cronlock.New(c, cronlock.WithObserver(inst), cronlock.WithNodeID(fmt.Sprintf("node-%d", i)),
			cronlock.WithLogger(cron.DiscardLogger))
		if err != nil {
			return nil, err
		}
		report, err := l.Job("report", cron.Every(time.Minute), func(context.Context) error { return nil })
		if err != nil {
			return nil, err
		}
		w.report = append(w.report, report)
		if i == 0 {
			w.export, err = l.Job("export", cron.Every(time.Minute), func(context.Context) error {
				return errors.New("export bucket not found")
			})
			if err != nil {
				return nil, err
			}
		}
	}

	w.store, err = httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix), httpidem.WithLocks(w.nodes[0]))
	if err != nil {
		return nil, err
	}
	caller := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	w.orders = httpidem.Idempotency(httpidem.IdempotencyConfig{
		Store: w.store, Principal: caller, Scope: "orders", Observer: inst,
	})(http.HandlerFunc(w.createOrder))
	w.votes = httpidem.Daily(httpidem.DailyConfig{
		Store: w.store, Scope: "vote", Subject: caller, Observer: inst,
		Object: func(r *http.Request) (string, error) { return r.URL.Path, nil },
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))

	// One in-memory SQLite database, one connection: SQLite has one writer.
	w.db, err = sql.Open("sqlite", "file:"+strings.ReplaceAll(prefix, ":", "-")+"?mode=memory&cache=shared")
	if err != nil {
		return nil, err
	}
	w.db.SetMaxOpenConns(1)
	for _, opts := range [][]dbguard.Option{
		{dbguard.WithStrategy(dbguard.Atomic)},
		{dbguard.WithStrategy(dbguard.Optimistic), dbguard.WithRetryBudget(50)},
		{dbguard.WithLocks(w.nodes[1]), dbguard.WithWaitTimeout(5 * time.Second)}, // Auto: Locked while Redis answers
	} {
		g, err := dbguard.New(w.db, append(opts, dbguard.WithObserver(inst))...)
		if err != nil {
			return nil, err
		}
		w.stock = append(w.stock, g)
	}
	if err := w.stock[0].Migrate(context.Background()); err != nil {
		return nil, err
	}
	return w, nil
}

// Close closes what newWorkload opened and deletes the workload's keys.
func (w *workload) Close() {
	for _, g := range w.stock {
		g.Close()
	}
	if w.db != nil {
		w.db.Close()
	}
	if w.store != nil {
		w.store.Close()
	}
	for _, c := range w.nodes {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := w.rdb.Scan(ctx, 0, w.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		w.rdb.Del(ctx, iter.Val())
	}
}

// Round runs the whole workload once.
func (w *workload) Round(ctx context.Context) error {
	w.rounds++
	for _, step := range []func(context.Context) error{
		w.contend, w.lose, w.permits, w.lead, w.readWrite, w.tick, w.requests, w.deduct,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// contend: three nodes rebuild one index at once, so two of them wait
// (latchkey.lock.waiters, wait durations); a TryLock finds a key held
// (contended) and a Lock gives up after 50 ms (failed, error.type timeout).
func (w *workload) contend(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(w.nodes))
	for i, c := range w.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Do(ctx, "index:rebuild", func(ctx context.Context) error {
				return sleep(ctx, 30*time.Millisecond)
			}, core.WithWaitTimeout(5*time.Second))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	held, err := w.nodes[0].TryLock(ctx, "sku:42")
	if err != nil {
		return err
	}
	defer held.Release(ctx)
	if _, err := w.nodes[1].TryLock(ctx, "sku:42"); !errors.Is(err, core.ErrNotAcquired) {
		return fmt.Errorf("a TryLock of a held key: %v", err)
	}
	if _, err := w.nodes[2].Lock(ctx, "sku:42", core.WithWaitTimeout(50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("a Lock of a held key with a 50ms bound: %v", err)
	}
	return held.Release(ctx)
}

// lose: a holder that does not renew its 100 ms lease loses it
// (latchkey.lock.losses, held duration with outcome lost).
func (w *workload) lose(ctx context.Context) error {
	l, err := w.nodes[0].TryLock(ctx, "doc:1", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		return err
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		return ctx.Err()
	}
	if !errors.Is(l.Err(), core.ErrLost) {
		return fmt.Errorf("lost lease: %v", l.Err())
	}
	// The holder is told before Redis expires the key, so this release
	// may still find it there; either way it is measured as lost.
	_ = l.Release(ctx)
	return nil
}

// permits: five exports share two permits (kind permit).
func (w *workload) permits(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.nodes[i%len(w.nodes)].Semaphore("export:nightly", 2).Do(ctx, func(ctx context.Context) error {
				return sleep(ctx, 20*time.Millisecond)
			}, core.WithWaitTimeout(5*time.Second))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lead: node 0 leads the scheduler, node 1 campaigns behind it and takes
// over when node 0 resigns (latchkey.leader.changes elected, resigned).
func (w *workload) lead(ctx context.Context) error {
	first, err := w.nodes[0].Campaign(ctx, "scheduler:leader", "node-0", core.WithWaitTimeout(5*time.Second))
	if err != nil {
		return err
	}
	next := make(chan error, 1)
	go func() {
		l, err := w.nodes[1].Campaign(ctx, "scheduler:leader", "node-1", core.WithWaitTimeout(5*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		next <- err
	}()
	if err := first.Release(ctx); err != nil {
		return err
	}
	return <-next
}

// readWrite: two readers share the config, then a writer takes it (kinds
// read and write).
func (w *workload) readWrite(ctx context.Context) error {
	var holds []*core.Lock
	for _, c := range w.nodes[:2] {
		r, err := c.RWMutex("config:app").RLock(ctx, core.WithWaitTimeout(5*time.Second))
		if err != nil {
			return err
		}
		holds = append(holds, r)
	}
	for _, r := range holds {
		if err := r.Release(ctx); err != nil {
			return err
		}
	}
	wr, err := w.nodes[2].RWMutex("config:app").Lock(ctx, core.WithWaitTimeout(5*time.Second))
	if err != nil {
		return err
	}
	return wr.Release(ctx)
}

// tick: the three nodes fire "report" together; one runs it, the others
// skip (claimed). "export" fails. A later round in the same minute finds
// both ticks claimed.
func (w *workload) tick(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, j := range w.report {
		wg.Add(1)
		go func() { defer wg.Done(); j.Run() }()
	}
	wg.Wait()
	w.export.Run()
	return ctx.Err()
}

// requests: Idempotency-Key orders (first, replayed, mismatch, in_flight)
// and once-per-day votes (first, duplicate), served in process.
func (w *workload) requests(ctx context.Context) error {
	key := func(k string) string { return fmt.Sprintf("r%d-%s", w.rounds, k) }
	expect := func(h http.Handler, want int, method, path, body string, hdr ...string) error {
		r := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		r.Header.Set("X-User", "alice")
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != want {
			return fmt.Errorf("%s %s %v: %d, want %d: %s", method, path, hdr, rec.Code, want, rec.Body)
		}
		return nil
	}
	order := func(want int, k, body string, hdr ...string) error {
		return expect(w.orders, want, "POST", "/orders", body, append([]string{"Idempotency-Key", key(k)}, hdr...)...)
	}
	if err := errors.Join(
		order(http.StatusCreated, "a", `{"sku":42}`),
		order(http.StatusCreated, "a", `{"sku":42}`),             // replayed
		order(http.StatusUnprocessableEntity, "a", `{"sku":43}`), // same key, other body
	); err != nil {
		return err
	}

	w.mu.Lock()
	w.entered, w.unblock = make(chan struct{}), make(chan struct{})
	entered, unblock := w.entered, w.unblock
	w.mu.Unlock()
	slow := make(chan error, 1)
	go func() { slow <- order(http.StatusCreated, "b", `{"sku":7}`, "X-Slow", "1") }()
	select {
	case <-entered:
	case err := <-slow:
		return fmt.Errorf("slow order: %v", err)
	}
	err := order(http.StatusConflict, "b", `{"sku":7}`) // in flight
	close(unblock)
	if err := errors.Join(err, <-slow); err != nil {
		return err
	}

	user := fmt.Sprintf("voter-%d", w.rounds)
	return errors.Join(
		expect(w.votes, http.StatusNoContent, "POST", "/vote/kettle", "", "X-User", user),
		expect(w.votes, http.StatusConflict, "POST", "/vote/kettle", "", "X-User", user), // duplicate
	)
}

// createOrder is the order handler; with X-Slow it waits to be let go.
func (w *workload) createOrder(rw http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Slow") != "" {
		w.mu.Lock()
		entered, unblock := w.entered, w.unblock
		w.mu.Unlock()
		close(entered)
		<-unblock
	}
	rw.WriteHeader(http.StatusCreated)
	fmt.Fprintln(rw, `{"order":"created"}`)
}

// deduct: each strategy sells a small stock, is refused an order larger
// than the stock and one for an unknown SKU (outcomes deducted,
// insufficient, unknown_sku; Auto decides as locked). One buyer at a time:
// concurrent ones would make Optimistic retry now and then, and a series
// that only some rounds emit (latchkey.stock.optimistic.retries) is one
// the dashboard test could not rely on.
func (w *workload) deduct(ctx context.Context) error {
	for _, g := range w.stock {
		if err := g.Restock(ctx, "kettle", 3); err != nil {
			return err
		}
		for range 3 {
			if err := g.Deduct(ctx, "kettle", 1); err != nil {
				return err
			}
		}
		if err := g.Deduct(ctx, "kettle", 99); !errors.Is(err, dbguard.ErrInsufficientStock) {
			return fmt.Errorf("deduct 99: %v", err)
		}
		if err := g.Deduct(ctx, "teapot", 1); !errors.Is(err, dbguard.ErrUnknownSKU) {
			return fmt.Errorf("deduct an unknown SKU: %v", err)
		}
	}
	return nil
}

// Hold takes a leadership, a permit and a lock with a waiter behind it,
// so that a scrape taken now shows the gauges above zero, and returns a
// function that gives them back.
func (w *workload) Hold(ctx context.Context) (release func(), err error) {
	var undo []func()
	release = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	give := func(l *core.Lock) func() { return func() { l.Release(context.WithoutCancel(ctx)) } }

	leader, err := w.nodes[2].Campaign(ctx, "scheduler:leader", "node-2", core.WithWaitTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	undo = append(undo, give(leader))
	permit, err := w.nodes[0].Semaphore("export:nightly", 2).Acquire(ctx, core.WithWaitTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	undo = append(undo, give(permit))
	held, err := w.nodes[0].TryLock(ctx, "index:rebuild")
	if err != nil {
		return nil, err
	}
	waited := make(chan error, 1)
	go func() {
		waited <- w.nodes[1].Do(ctx, "index:rebuild", func(context.Context) error { return nil },
			core.WithWaitTimeout(10*time.Second))
	}()
	undo = append(undo, func() { held.Release(context.WithoutCancel(ctx)); <-waited })
	return release, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
