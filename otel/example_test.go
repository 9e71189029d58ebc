package otel_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/otel"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// printSpans prints the ended spans: name, outcome, lock name or job, and
// the parent's name.
func printSpans(sr *tracetest.SpanRecorder) {
	names := map[string]string{}
	for _, s := range sr.Ended() {
		names[s.SpanContext().SpanID().String()] = s.Name()
	}
	for _, s := range sr.Ended() {
		line := []string{s.Name()}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "latchkey.outcome", "latchkey.lock.name", "latchkey.cron.job", "latchkey.http.scope", "error.type":
				line = append(line, string(kv.Key)+"="+kv.Value.String())
			}
		}
		if p, ok := names[s.Parent().SpanID().String()]; ok {
			line = append(line, "(in "+p+")")
		}
		fmt.Println(strings.Join(line, " "))
	}
}

// This example instruments a Redis lock client and takes a lock inside a
// request's span: the lock's spans are children of the request, named by
// the lock name "sku", not by the key; contention is an outcome, not an
// error.
func Example() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mp := sdkmetric.NewMeterProvider()
	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))

	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	client, err := core.NewRedis(rdb, core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx, req := tp.Tracer("shop").Start(context.Background(), "POST /orders")
	_ = client.Do(ctx, "sku:42", func(ctx context.Context) error {
		_, err := client.TryLock(context.Background(), "sku:42") // another caller: busy
		return err
	})
	req.End()
	printSpans(sr)
	// Output:
	// latchkey.acquire latchkey.lock.name=sku latchkey.outcome=acquired (in POST /orders)
	// latchkey.acquire latchkey.lock.name=sku latchkey.outcome=contended
	// latchkey.release latchkey.lock.name=sku latchkey.outcome=released (in POST /orders)
	// POST /orders
}

// This example gives the same Instrumentation to cronlock: a tick is a
// latchkey.cron.run span, with its running lease's lock spans inside.
func Example_cronlock() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(sdkmetric.NewMeterProvider()))

	client, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	at := time.Date(2031, 5, 6, 3, 0, 1, 0, time.UTC)
	l, err := cronlock.New(client, cronlock.WithObserver(inst), cronlock.WithLogger(cron.DiscardLogger),
		cronlock.WithClock(func() time.Time { return at }))
	if err != nil {
		log.Fatal(err)
	}
	job, _ := l.Job("report", cron.Every(time.Hour), func(context.Context) error { return nil })
	job.Run()
	job.Run() // the same tick again: skipped
	printSpans(sr)
	// Output:
	// latchkey.acquire latchkey.lock.name=cron latchkey.outcome=acquired (in latchkey.cron.run)
	// latchkey.release latchkey.lock.name=cron latchkey.outcome=released (in latchkey.cron.run)
	// latchkey.cron.run latchkey.cron.job=report latchkey.outcome=ran
	// latchkey.cron.run latchkey.cron.job=report latchkey.outcome=skipped
}

// This example reads the held-locks gauge from a MeterProvider: it counts
// leases, and is back to zero once they are released.
func ExampleWithMeterProvider() {
	reader := sdkmetric.NewManualReader()
	inst := otel.New(otel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	client, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	held := func() int64 {
		var rm metricdata.ResourceMetrics
		_ = reader.Collect(context.Background(), &rm)
		for _, m := range rm.ScopeMetrics[0].Metrics {
			if m.Name == "latchkey.lock.held.count" {
				return m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
			}
		}
		return -1
	}
	ctx := context.Background()
	a, _ := client.TryLock(ctx, "sku:1")
	b, _ := client.TryLock(ctx, "sku:2")
	fmt.Println("held:", held())
	a.Release(ctx)
	b.Release(ctx)
	fmt.Println("held:", held())
	// Output:
	// held: 2
	// held: 0
}

// This example names locks whose keys have no ':' separator, such as
// "invoice-2031-0042", by their first word.
func ExampleWithLockName() {
	sr := tracetest.NewSpanRecorder()
	inst := otel.New(
		otel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))),
		otel.WithLockName(func(key string) string {
			name, _, _ := strings.Cut(key, "-")
			return name
		}))
	client, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	h, _ := client.TryLock(context.Background(), "invoice-2031-0042")
	h.Release(context.Background())
	printSpans(sr)
	// Output:
	// latchkey.acquire latchkey.lock.name=invoice latchkey.outcome=acquired
	// latchkey.release latchkey.lock.name=invoice latchkey.outcome=released
}

// This example shows the default lock names.
func ExampleDefaultLockName() {
	for _, key := range []string{"sku:42", "cron:report:running", "8e03978e-1f2b"} {
		fmt.Printf("%-20s → %s\n", key, otel.DefaultLockName(key))
	}
	// Output:
	// sku:42               → sku
	// cron:report:running  → cron
	// 8e03978e-1f2b        → _OTHER
}

// This example makes spans carry a hash of the key, to tell apart the
// spans of different keys without recording user IDs; WithAttributes adds
// a fixed attribute everywhere.
func ExampleWithKeyAttribute() {
	sr := tracetest.NewSpanRecorder()
	inst := otel.New(
		otel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))),
		otel.WithKeyAttribute(otel.KeyHashed),
		otel.WithAttributes(attribute.String("shard", "eu-1")))
	client, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	h, _ := client.TryLock(context.Background(), "user:42")
	h.Release(context.Background())
	for _, kv := range sr.Ended()[0].Attributes() {
		if kv.Key == "latchkey.lock.key_hash" || kv.Key == "shard" {
			fmt.Println(kv.Key, kv.Value.String())
		}
	}
	// Output:
	// shard eu-1
	// latchkey.lock.key_hash ea3fd43be1e57d62
}

// This example traces watchdog renewals, which are only measured by
// default: each is a latchkey.renew span under the lease's acquire span.
func ExampleWithRenewalSpans() {
	sr := tracetest.NewSpanRecorder()
	inst := otel.New(
		otel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))),
		otel.WithRenewalSpans(true))
	client, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	h, _ := client.TryLock(context.Background(), "report:daily", core.WithTTL(150*time.Millisecond))
	renewed := func() bool { // the watchdog renews every 50 ms
		for _, s := range sr.Ended() {
			if s.Name() == "latchkey.renew" && s.Parent().SpanID() == sr.Ended()[0].SpanContext().SpanID() {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); !renewed() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	h.Release(context.Background())
	fmt.Println("renewal span under the acquire span:", renewed())
	// Output: renewal span under the acquire span: true
}

// printCounters prints the int64 sums of the reader's metrics named in
// names, one line per series.
func printCounters(reader sdkmetric.Reader, names ...string) {
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || !slices.Contains(names, m.Name) {
			continue
		}
		for _, p := range sum.DataPoints {
			var kv []string
			for _, a := range p.Attributes.ToSlice() {
				kv = append(kv, string(a.Key)+"="+a.Value.String())
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, strings.Join(kv, ","), p.Value))
		}
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
}

// This example gives the Instrumentation to the Idempotency-Key and
// once-per-day middlewares of package httpidem (echomw's take the same
// Observer field): each request's decision is a span under the request's
// span, named by its scope, never by its key or user, and a count by
// outcome. A replay and a second vote the same day are outcomes, not
// errors.
func Example_httpidem() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))

	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store := must(httpidem.NewRedisStore(rdb))
	defer store.Close()

	user := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil } // your auth
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	orders := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: user, Scope: "orders", Observer: inst})(ok)
	votes := httpidem.Daily(httpidem.DailyConfig{Store: store, Scope: "vote", Subject: user, Observer: inst})(ok)

	send := func(h http.Handler, path, key string) {
		r := httptest.NewRequest("POST", path, strings.NewReader("{}"))
		r.Header.Set("X-User", "ann")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		ctx, span := tp.Tracer("shop").Start(r.Context(), "POST "+path) // otelhttp's server span
		h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
		span.End()
	}
	send(orders, "/orders", "k-1")
	send(orders, "/orders", "k-1") // a retry
	send(votes, "/vote", "")
	send(votes, "/vote", "") // again the same day
	printSpans(sr)
	printCounters(reader, "latchkey.idempotency.requests", "latchkey.daily.claims")
	// Output:
	// latchkey.idempotency latchkey.http.scope=orders latchkey.outcome=first (in POST /orders)
	// POST /orders
	// latchkey.idempotency latchkey.http.scope=orders latchkey.outcome=replayed (in POST /orders)
	// POST /orders
	// latchkey.daily latchkey.http.scope=vote latchkey.outcome=first (in POST /vote)
	// POST /vote
	// latchkey.daily latchkey.http.scope=vote latchkey.outcome=duplicate (in POST /vote)
	// POST /vote
	// latchkey.daily.claims{latchkey.http.scope=vote,latchkey.outcome=duplicate} 1
	// latchkey.daily.claims{latchkey.http.scope=vote,latchkey.outcome=first} 1
	// latchkey.idempotency.requests{latchkey.http.scope=orders,latchkey.outcome=first} 1
	// latchkey.idempotency.requests{latchkey.http.scope=orders,latchkey.outcome=replayed} 1
}

// This example traces echomw's ParamLock with the lock client observed
// too: the lock's spans nest under the latchkey.paramlock span, named by
// the route. A WithLockName that cuts ParamLock's keys at '|' names the
// lock by its route instead of the default (the key's prefix before ':').
func Example_echomw() {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(sdkmetric.NewMeterProvider()),
		otel.WithLockName(func(key string) string {
			name, _, _ := strings.Cut(key, "|") // "/sku/:sku/deduct|sku=42"
			return name
		}))
	locks, err := core.NewMemory(core.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	e := echo.New()
	e.POST("/sku/:sku/deduct", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, Observer: inst}))

	r := httptest.NewRequest("POST", "/sku/42/deduct", nil)
	ctx, span := tp.Tracer("shop").Start(r.Context(), "POST /sku/:sku/deduct") // otelecho's server span
	e.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	span.End()
	printSpans(sr)
	// Output:
	// latchkey.acquire latchkey.lock.name=/sku/:sku/deduct latchkey.outcome=acquired (in latchkey.paramlock)
	// latchkey.release latchkey.lock.name=/sku/:sku/deduct latchkey.outcome=released (in latchkey.paramlock)
	// latchkey.paramlock latchkey.http.scope=/sku/:sku/deduct latchkey.outcome=acquired (in POST /sku/:sku/deduct)
	// POST /sku/:sku/deduct
}
