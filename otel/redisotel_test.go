package otel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// TestRedisCommandSpansNest: with go-redis's own OpenTelemetry hook
// installed, the Redis commands of an acquisition (its attempts while it
// waits included) and of a release are children of latchkey.acquire and
// latchkey.release, which are children of the caller's span.
func TestRedisCommandSpansNest(t *testing.T) {
	tel := newTelemetry(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tel.tp)); err != nil {
		t.Fatal(err)
	}
	c := mustNew(core.NewRedis(rdb, core.WithObserver(tel.inst)))
	t.Cleanup(func() { c.Close() })
	holder := mustNew(core.NewRedis(rdb)) // not observed
	t.Cleanup(func() { holder.Close() })
	key := uniqueKey(t, "sku")
	held, err := holder.TryLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { held.Release(context.Background()) })

	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
	h, err := c.Lock(ctx, key, core.WithWaitTimeout(5*time.Second)) // waits for the holder
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	parent.End()

	acq, rel := tel.span(t, "latchkey.acquire"), tel.span(t, "latchkey.release")
	for _, s := range []trace.SpanContext{acq.Parent(), rel.Parent()} {
		if s.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("lock span parent %v, want the request", s.SpanID())
		}
	}
	if n := attrs(acq)["latchkey.lock.attempts"].AsInt64(); n < 2 {
		t.Errorf("the acquisition did not wait: %d attempts", n)
	}
	under := map[trace.SpanID]int{}
	for _, s := range tel.sr.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		if !strings.HasPrefix(s.Name(), "eval") { // the lock scripts
			continue
		}
		if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			continue // the holder's commands
		}
		under[s.Parent().SpanID()]++
	}
	if under[acq.SpanContext().SpanID()] < 2 || under[rel.SpanContext().SpanID()] < 1 || len(under) != 2 {
		t.Errorf("script spans by parent: %v (acquire %v, release %v)", under, acq.SpanContext().SpanID(), rel.SpanContext().SpanID())
	}
}

// TestHTTPCommandSpansNest: over a real HTTP server, with go-redis's own
// OpenTelemetry hook installed, an Idempotency-Key request's trace is
// request → latchkey.idempotency → (Redis commands reading and storing
// the record; latchkey.acquire and latchkey.release of the store's
// observed core.Client, with their scripts under them; the handler's
// span), and a Daily request's is request → latchkey.daily → its claim
// script.
func TestHTTPCommandSpansNest(t *testing.T) {
	tel := newTelemetry(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tel.tp)); err != nil {
		t.Fatal(err)
	}
	locks := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(httpidem.DefaultKeyPrefix), core.WithObserver(tel.inst)))
	store := must(httpidem.NewRedisStore(rdb, httpidem.WithLocks(locks)))
	t.Cleanup(func() { store.Close(); locks.Close() })

	tracer := tel.tp.Tracer("test")
	mux := http.NewServeMux()
	mux.Handle("POST /orders", httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: userOf, Observer: tel.inst})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, span := tracer.Start(r.Context(), "create order")
			span.End()
			w.WriteHeader(http.StatusCreated)
		})))
	mux.Handle("POST /vote/{item}", httpidem.Daily(httpidem.DailyConfig{Store: store, Scope: "vote", Subject: userOf, Observer: tel.inst})(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	requests := make(chan trace.SpanContext, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What otelhttp.NewHandler does, in short.
		ctx, span := tracer.Start(r.Context(), r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		requests <- span.SpanContext()
		mux.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	send := func(path, key string) trace.SpanContext {
		t.Helper()
		r, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("{}"))
		r.Header.Set("X-User", "ann")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-requests
	}

	req := send("/orders", "k-1")
	waitFor(t, "the request span", 5*time.Second, func() bool { return len(tel.spans("POST /orders")) == 1 })
	idem := tel.childOf(t, req, "latchkey.idempotency").SpanContext()
	acq, rel := tel.childOf(t, idem, "latchkey.acquire"), tel.childOf(t, idem, "latchkey.release")
	tel.childOf(t, idem, "create order")
	under := commandsByParent(tel, req.TraceID())
	if len(under) != 3 || len(under[idem.SpanID()]) < 2 || len(under[acq.SpanContext().SpanID()]) < 1 || len(under[rel.SpanContext().SpanID()]) < 1 {
		t.Errorf("Redis commands by parent: %v (idempotency %v, acquire %v, release %v)",
			under, idem.SpanID(), acq.SpanContext().SpanID(), rel.SpanContext().SpanID())
	}

	req = send("/vote/9", "")
	waitFor(t, "the request span", 5*time.Second, func() bool { return len(tel.spans("POST /vote/9")) == 1 })
	daily := tel.childOf(t, req, "latchkey.daily").SpanContext()
	if under := commandsByParent(tel, req.TraceID()); len(under) != 1 || len(under[daily.SpanID()]) == 0 {
		t.Errorf("Redis commands by parent: %v (daily %v)", under, daily.SpanID())
	}
}

// commandsByParent returns the names of the Redis command spans of a
// trace by parent span, leaving out those nested in go-redis's own spans
// (a connection's set-up commands under its dial span).
func commandsByParent(tel *telemetry, id trace.TraceID) map[trace.SpanID][]string {
	redisSpans := map[trace.SpanID]bool{}
	for _, s := range tel.sr.Ended() {
		if strings.HasPrefix(s.InstrumentationScope().Name, "github.com/redis/go-redis") {
			redisSpans[s.SpanContext().SpanID()] = true
		}
	}
	out := map[trace.SpanID][]string{}
	for _, s := range tel.sr.Ended() {
		p := s.Parent().SpanID()
		if s.SpanKind() == trace.SpanKindClient && s.SpanContext().TraceID() == id && !redisSpans[p] {
			out[p] = append(out[p], s.Name())
		}
	}
	return out
}
