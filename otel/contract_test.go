package otel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/otel"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
)

// TestContract pins the telemetry contract — scope, span names, attribute
// keys and values, metric names, units, descriptions, instrument kinds,
// bucket boundaries and attribute sets — so that no dashboard or alert
// breaks silently. A deliberate change edits this test and the README's
// table together.
func TestContract(t *testing.T) {
	if otel.ScopeName != "github.com/latchkey/latchkey/otel" || otel.Version == "" {
		t.Fatalf("scope %q version %q", otel.ScopeName, otel.Version)
	}
	tel := newTelemetry(t)
	generate(t, tel)

	t.Run("spans", func(t *testing.T) {
		want := map[string]string{ // "<span> <outcome>" → its attribute keys
			"latchkey.acquire acquired":  "latchkey.lock.attempts latchkey.lock.fence latchkey.lock.kind latchkey.lock.name latchkey.lock.wait.duration latchkey.operation.name latchkey.outcome",
			"latchkey.acquire contended": "latchkey.lock.attempts latchkey.lock.kind latchkey.lock.name latchkey.lock.wait.duration latchkey.operation.name latchkey.outcome",
			"latchkey.acquire failed":    "error.type latchkey.lock.attempts latchkey.lock.kind latchkey.lock.name latchkey.lock.wait.duration latchkey.operation.name latchkey.outcome",
			"latchkey.extend extended":   "latchkey.lock.fence latchkey.lock.kind latchkey.lock.name latchkey.operation.name latchkey.outcome",
			"latchkey.release released":  "latchkey.lock.fence latchkey.lock.held.duration latchkey.lock.kind latchkey.lock.name latchkey.operation.name latchkey.outcome",
			"latchkey.release lost":      "error.type latchkey.lock.fence latchkey.lock.held.duration latchkey.lock.kind latchkey.lock.name latchkey.operation.name latchkey.outcome",
			"latchkey.lost lost":         "error.type latchkey.lock.fence latchkey.lock.held.duration latchkey.lock.kind latchkey.lock.name latchkey.outcome",
			"latchkey.cron.run ran":      "latchkey.cron.catch_up latchkey.cron.job latchkey.cron.locked latchkey.cron.node latchkey.cron.planned latchkey.cron.run.duration latchkey.lock.fence latchkey.outcome",
			"latchkey.cron.run skipped":  "latchkey.cron.catch_up latchkey.cron.job latchkey.cron.locked latchkey.cron.node latchkey.cron.planned latchkey.cron.skip_reason latchkey.outcome",
			"latchkey.cron.run failed":   "error.type latchkey.cron.catch_up latchkey.cron.job latchkey.cron.locked latchkey.cron.node latchkey.cron.planned latchkey.cron.run.duration latchkey.lock.fence latchkey.outcome",

			"latchkey.idempotency first":         "latchkey.http.scope latchkey.outcome",
			"latchkey.idempotency replayed":      "latchkey.http.scope latchkey.outcome",
			"latchkey.idempotency in_flight":     "latchkey.http.scope latchkey.outcome",
			"latchkey.idempotency store_error":   "error.type latchkey.http.scope latchkey.outcome",
			"latchkey.daily first":               "latchkey.http.scope latchkey.outcome",
			"latchkey.daily duplicate":           "latchkey.http.scope latchkey.outcome",
			"latchkey.daily released":            "latchkey.http.scope latchkey.outcome",
			"latchkey.paramlock acquired":        "latchkey.http.scope latchkey.outcome",
			"latchkey.paramlock locked":          "latchkey.http.scope latchkey.outcome",
			"latchkey.stock.deduct deducted":     stockKeys,
			"latchkey.stock.deduct insufficient": stockKeys,
			"latchkey.stock.deduct unknown_sku":  stockKeys,
			"latchkey.stock.deduct busy":         stockKeys,
			"latchkey.stock.deduct failed":       "error.type " + stockKeys,
			"latchkey.activity.lock ran":         "latchkey.activity.type latchkey.lock.fence latchkey.outcome",
			"latchkey.activity.lock busy":        "latchkey.activity.type latchkey.outcome",
			"latchkey.activity.lock lost":        "error.type latchkey.activity.type latchkey.lock.fence latchkey.outcome",
		}
		got := map[string]string{}
		for _, s := range tel.sr.Ended() {
			if s.InstrumentationScope().Name == "test" {
				continue // the test's request spans
			}
			k := s.Name() + " " + attrs(s)[outcome].AsString()
			if prev, ok := got[k]; ok && prev != keyList(s.Attributes()) {
				t.Errorf("%s: attribute keys vary: %q and %q", k, prev, keyList(s.Attributes()))
			}
			got[k] = keyList(s.Attributes())
			if s.InstrumentationScope().Name != otel.ScopeName || s.InstrumentationScope().Version != otel.Version {
				t.Errorf("%s: scope %v", s.Name(), s.InstrumentationScope())
			}
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s:\n got  %q\n want %q", k, got[k], w)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("span %q is not in the contract", k)
			}
		}
	})

	t.Run("events", func(t *testing.T) {
		want := map[string]string{ // "<span> <event>" → its attribute keys
			"latchkey.cron.run latchkey.cron.missed": "latchkey.cron.missed.catch_up latchkey.cron.missed.count latchkey.cron.missed.first latchkey.cron.missed.last",
		}
		got := map[string]string{}
		for _, s := range tel.sr.Ended() {
			for _, e := range s.Events() {
				got[s.Name()+" "+e.Name] = keyList(e.Attributes)
			}
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s:\n got  %q\n want %q", k, got[k], w)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("event %q is not in the contract", k)
			}
		}
		var catchUps int
		for _, s := range tel.spans("latchkey.cron.run") {
			if a := attrs(s); a["latchkey.cron.catch_up"].AsBool() {
				catchUps++
				if a["latchkey.cron.planned"].AsString() != "2031-05-06T05:00:00Z" {
					t.Errorf("catch-up run of %s, want 05:00", a["latchkey.cron.planned"].AsString())
				}
			}
		}
		if catchUps != 1 {
			t.Errorf("%d catch-up spans, want 1", catchUps)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		kindOf := map[string]string{"pool": "permit", "leader": "leader"} // else "lock"
		lock := func(name string, kv ...attribute.KeyValue) attribute.Set {
			kind := kindOf[name]
			if kind == "" {
				kind = "lock"
			}
			return attribute.NewSet(append(kv, attribute.String("latchkey.lock.name", name), attribute.String("latchkey.lock.kind", kind))...)
		}
		op := func(name, op, outcome string, kv ...attribute.KeyValue) attribute.Set {
			return lock(name, append(kv, attribute.String("latchkey.operation.name", op), attribute.String("latchkey.outcome", outcome))...)
		}
		oc := func(name, outcome string, kv ...attribute.KeyValue) attribute.Set {
			return lock(name, append(kv, attribute.String("latchkey.outcome", outcome))...)
		}
		job := func(job, outcome string, kv ...attribute.KeyValue) attribute.Set {
			return attribute.NewSet(append(kv, attribute.String("latchkey.cron.job", job), attribute.String("latchkey.outcome", outcome))...)
		}
		scoped := func(scope, outcome string, kv ...attribute.KeyValue) attribute.Set {
			return attribute.NewSet(append(kv, attribute.String("latchkey.http.scope", scope), attribute.String("latchkey.outcome", outcome))...)
		}
		stock := func(strategy, outcome string, kv ...attribute.KeyValue) attribute.Set {
			return attribute.NewSet(append(kv, attribute.String("latchkey.stock.strategy", strategy), attribute.String("latchkey.outcome", outcome))...)
		}
		activity := func(outcome string, kv ...attribute.KeyValue) attribute.Set {
			return attribute.NewSet(append(kv, attribute.String("latchkey.activity.type", "Charge"), attribute.String("latchkey.outcome", outcome))...)
		}
		et := attribute.String
		hist := func(name, desc string, sets ...attribute.Set) metricdata.Metrics {
			var dps []metricdata.HistogramDataPoint[float64]
			for _, s := range sets {
				dps = append(dps, metricdata.HistogramDataPoint[float64]{Attributes: s})
			}
			return metricdata.Metrics{Name: name, Description: desc, Unit: "s",
				Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: dps}}
		}
		sum := func(name, desc, unit string, monotonic bool, sets ...attribute.Set) metricdata.Metrics {
			var dps []metricdata.DataPoint[int64]
			for _, s := range sets {
				dps = append(dps, metricdata.DataPoint[int64]{Attributes: s})
			}
			return metricdata.Metrics{Name: name, Description: desc, Unit: unit,
				Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: monotonic, DataPoints: dps}}
		}
		want := []metricdata.Metrics{
			hist("latchkey.lock.operation.duration", "Duration of lock operations (acquire including its wait, release, extend, renew).",
				op("sku", "acquire", "acquired"), op("sku", "acquire", "contended"),
				op("sku", "acquire", "failed", et("error.type", "timeout")),
				op("sku", "extend", "extended"), op("sku", "release", "released"),
				op("doc", "acquire", "acquired"), op("doc", "release", "lost", et("error.type", "lost")),
				op("pool", "acquire", "acquired"), op("pool", "release", "released"),
				op("leader", "acquire", "acquired"), op("leader", "release", "released"),
				op("cron", "acquire", "acquired"), op("cron", "release", "released")),
			hist("latchkey.lock.wait.duration", "Time an acquisition spent waiting for a held key, until it got the lock or gave up.",
				oc("sku", "acquired"), oc("sku", "contended"), oc("sku", "failed", et("error.type", "timeout")),
				oc("doc", "acquired"), oc("pool", "acquired"), oc("leader", "acquired"), oc("cron", "acquired")),
			hist("latchkey.lock.held.duration", "Time a lease was held, from acquisition to release or loss.",
				oc("sku", "released"), oc("doc", "lost"), oc("pool", "released"), oc("leader", "released"), oc("cron", "released")),
			sum("latchkey.lock.held.count", "Leases held by this process now.", "{lock}", false,
				lock("sku"), lock("doc"), lock("pool"), lock("leader"), lock("cron")),
			sum("latchkey.lock.waiters", "Acquisitions of this process waiting for a held key now.", "{waiter}", false,
				lock("sku")),
			sum("latchkey.lock.losses", "Leases lost before their release: expired, taken over, or not renewable.", "{lock}", true,
				lock("doc")),
			sum("latchkey.leader.changes", "Leadership changes of this process (Campaign): elected, resigned, lost.", "{change}", true,
				oc("leader", "elected"), oc("leader", "resigned")),
			sum("latchkey.cron.runs", "Cron ticks handled by this node, by outcome.", "{run}", true,
				job("report", "ran"), job("report", "skipped", et("latchkey.cron.skip_reason", "claimed")),
				job("export", "failed", et("error.type", "_OTHER")),
				job("digest", "ran"), job("digest", "ran", attribute.Bool("latchkey.cron.catch_up", true))),
			hist("latchkey.cron.run.duration", "Duration of cron job function runs.",
				job("report", "ran"), job("export", "failed", et("error.type", "_OTHER")),
				job("digest", "ran"), job("digest", "ran", attribute.Bool("latchkey.cron.catch_up", true))),
			sum("latchkey.cron.missed", "Missed cron ticks found by this node's look-backs, by what the policy does with them: catch_up, skipped.", "{tick}", true,
				job("digest", "catch_up"), job("digest", "skipped")),
			sum("latchkey.idempotency.requests", "Requests decided by the Idempotency-Key middleware, by last outcome.", "{request}", true,
				scoped("orders", "first"), scoped("orders", "replayed"), scoped("orders", "in_flight"),
				scoped("orders", "store_error", et("error.type", "backend"))),
			sum("latchkey.daily.claims", "Requests decided by the once-per-day middleware, by scope and last outcome.", "{claim}", true,
				scoped("vote", "first"), scoped("vote", "duplicate"), scoped("vote", "released")),
			sum("latchkey.stock.deductions", "Stock deductions (dbguard), by the strategy that decided and outcome.", "{deduction}", true,
				stock("locked", "deducted"), stock("locked", "insufficient"), stock("locked", "unknown_sku"),
				stock("optimistic", "deducted"), stock("optimistic", "busy"),
				stock("atomic", "failed", et("error.type", "database"))),
			sum("latchkey.stock.optimistic.retries", "Optimistic deduction attempts lost to concurrent writers and retried or given up.", "{retry}", true,
				attribute.NewSet(attribute.String("latchkey.stock.strategy", "optimistic"))),
			sum("latchkey.activity.locks", "Keyed Temporal activity executions (temporallock), by activity type and outcome.", "{execution}", true,
				activity("ran"), activity("busy"), activity("lost", et("error.type", "lost"))),
		}
		got := tel.collect(t)
		if len(got) != len(want) {
			t.Errorf("%d metrics, want %d", len(got), len(want))
		}
		buckets := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
		for _, w := range want {
			g, ok := got[w.Name]
			if !ok {
				t.Errorf("no metric %s", w.Name)
				continue
			}
			metricdatatest.AssertEqual(t, w, g, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue(), metricdatatest.IgnoreExemplars())
			if h, ok := g.Data.(metricdata.Histogram[float64]); ok {
				for _, p := range h.DataPoints {
					if !slices.Equal(p.Bounds, buckets) {
						t.Errorf("%s: bounds %v", w.Name, p.Bounds)
					}
				}
			}
		}
		if v := tel.value(t, "latchkey.lock.held.count"); v != 0 {
			t.Errorf("held count %v at the end", v)
		}
	})
}

// generate makes one of each span and measurement of the contract.
func generate(t *testing.T, tel *telemetry) {
	t.Helper()
	ctx := context.Background()
	c := mustNew(core.NewMemory(core.WithObserver(tel.inst)))
	defer c.Close()

	a, err := c.TryLock(ctx, "sku:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "sku:1"); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "sku:1", core.WithWaitTimeout(20*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if err := a.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	lost, err := c.TryLock(ctx, "doc:1", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the loss", 5*time.Second, func() bool { return len(tel.spans("latchkey.lost")) == 1 })
	// The holder is told a margin before the store's expiry: release once
	// the store has let the lease go, so the release finds it gone.
	waitFor(t, "the expiry", 5*time.Second, func() bool {
		info, err := c.Inspect(ctx, "doc:1")
		return err == nil && !info.Held
	})
	lost.Release(ctx)

	permit, err := c.Semaphore("pool:1", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Campaign(ctx, "leader:1", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Release(ctx); err != nil {
		t.Fatal(err)
	}

	at := time.Date(2031, 5, 6, 3, 0, 1, 0, time.UTC)
	l := mustNew(cronlock.New(c, cronlock.WithObserver(tel.inst), cronlock.WithNodeID("node-a"),
		cronlock.WithClock(func() time.Time { return at }), cronlock.WithLogger(cron.DiscardLogger)))
	report, _ := l.Job("report", cron.Every(time.Hour), func(context.Context) error { return nil })
	export, _ := l.Job("export", cron.Every(time.Hour), func(context.Context) error { return errors.New("bucket not found") })
	report.Run()
	report.Run() // claimed
	export.Run()

	// A paused process: "digest" ran at 03:00, and its 04:00 and 05:00
	// ticks were missed; MissedRunAll(1) catches up 05:00 before 06:00.
	digestAt := time.Date(2031, 5, 6, 3, 0, 1, 0, time.UTC)
	ld := mustNew(cronlock.New(c, cronlock.WithObserver(tel.inst), cronlock.WithNodeID("node-a"),
		cronlock.WithMissed(cronlock.MissedRunAll(1)), cronlock.WithSpread(false),
		cronlock.WithClock(func() time.Time { return digestAt }), cronlock.WithLogger(cron.DiscardLogger)))
	digest, _ := ld.Job("digest", cron.Every(time.Hour), func(context.Context) error { return nil })
	digest.Run()
	digestAt = digestAt.Add(3 * time.Hour)
	digest.Run()

	generateHTTP(t, tel)
	generateStock(t, tel)
	generateActivity(t, tel)
}

// stockKeys are the attribute keys of every latchkey.stock.deduct span.
const stockKeys = "latchkey.operation.name latchkey.outcome latchkey.stock.fallback latchkey.stock.retries latchkey.stock.strategy"

// generateStock makes one of each stock deduction span and measurement of
// the contract, on SQLite, with a lock client that is not observed.
func generateStock(t *testing.T, tel *telemetry) {
	t.Helper()
	ctx := context.Background()
	db := stockDB(t)
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	auto := mustNew(dbguard.New(db, dbguard.WithLocks(locks), dbguard.WithObserver(tel.inst)))
	optimistic := mustNew(dbguard.New(db, dbguard.WithStrategy(dbguard.Optimistic), dbguard.WithRetryBudget(1), dbguard.WithObserver(tel.inst)))
	closed := stockDB(t)
	closed.Close()
	broken := mustNew(dbguard.New(closed, dbguard.WithDialect(dbguard.SQLite), dbguard.WithStrategy(dbguard.Atomic), dbguard.WithObserver(tel.inst)))
	restock(t, auto, 5, "sku-1")

	if err := auto.Deduct(ctx, "sku-1", 1); err != nil {
		t.Fatal(err)
	}
	if err := auto.Deduct(ctx, "sku-1", 99); !errors.Is(err, dbguard.ErrInsufficientStock) {
		t.Fatal(err)
	}
	if err := auto.Deduct(ctx, "sku-0", 1); !errors.Is(err, dbguard.ErrUnknownSKU) {
		t.Fatal(err)
	}
	loseRaces(t, db, 1)
	if err := optimistic.Deduct(ctx, "sku-1", 1); err != nil {
		t.Fatal(err)
	}
	loseRaces(t, db, 2)
	if err := optimistic.Deduct(ctx, "sku-1", 1); !errors.Is(err, dbguard.ErrBusy) {
		t.Fatal(err)
	}
	if err := broken.Deduct(ctx, "sku-1", 1); err == nil || errors.Is(err, dbguard.ErrBusy) {
		t.Fatal(err)
	}
}

// generateHTTP makes one of each HTTP decision span and measurement of the
// contract, through httpidem and echomw, inside request spans.
func generateHTTP(t *testing.T, tel *telemetry) {
	t.Helper()
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	o := newOrders()
	cfg := httpidem.IdempotencyConfig{Store: store, Principal: userOf, Scope: "orders", Observer: tel.inst}
	orders := httpidem.Idempotency(cfg)(o)
	cfg.Store = failStore{store}
	broken := httpidem.Idempotency(cfg)(o)
	serveIn(tel, orders, post("/orders", "k-1", "{}"))
	serveIn(tel, orders, post("/orders", "k-1", "{}"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveIn(tel, orders, post("/orders", "k-2", "{}", "X-Block", "1"))
	}()
	<-o.entered
	serveIn(tel, orders, post("/orders", "k-2", "{}"))
	close(o.unblock)
	<-done
	serveIn(tel, broken, post("/orders", "k-3", "{}"))

	vote := httpidem.Daily(httpidem.DailyConfig{Store: store, Scope: "vote", Subject: userOf, Observer: tel.inst})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Fail") != "" {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}))
	serveIn(tel, vote, post("/vote", "", ""))
	serveIn(tel, vote, post("/vote", "", ""))
	serveIn(tel, vote, post("/vote", "", "", "X-User", "bob", "X-Fail", "1"))

	locks := mustNew(core.NewMemory()) // not observed: only the paramlock spans
	defer locks.Close()
	e := echo.New()
	e.POST("/sku/:sku", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, Name: "sku", Observer: tel.inst}))
	serveIn(tel, e, httptest.NewRequest("POST", "/sku/1", nil))
	held, err := locks.TryLock(context.Background(), "sku|sku=1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	serveIn(tel, e, httptest.NewRequest("POST", "/sku/1", nil))
}

// failStore is a store whose Begin fails.
type failStore struct{ httpidem.IdempotencyStore }

func (failStore) Begin(context.Context, httpidem.BeginArgs) (httpidem.Begun, error) {
	return httpidem.Begun{}, errors.New("connection refused")
}
