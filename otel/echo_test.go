package otel_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TestParamLockSpans: a ParamLock request is a latchkey.paramlock span
// under the request's span, named by the route template; the observed
// core.Client's acquire and release spans and the handler's spans nest
// under it. A held lock (409) is an outcome; a lost one an error.
func TestParamLockSpans(t *testing.T) {
	tel := newTelemetry(t)
	// The loss reaches the Observer just after the holder (the handler's
	// context): the handler waits for it, so that the event lands on the
	// span before the middleware ends it.
	told := make(chan struct{}, 1)
	locks, _, mr := redisClient(t, tel.inst, core.WithObserver(lossTold{tel.inst, told}))
	entered := make(chan struct{}, 1)
	e := echo.New()
	e.POST("/sku/:sku/deduct", func(c echo.Context) error {
		_, span := tel.tp.Tracer("test").Start(c.Request().Context(), "deduct")
		defer span.End()
		if c.Request().Header.Get("X-Lose") != "" {
			entered <- struct{}{}
			select {
			case <-c.Request().Context().Done():
				select {
				case <-told:
				case <-time.After(5 * time.Second):
				}
			case <-time.After(10 * time.Second):
			}
		}
		return c.NoContent(http.StatusNoContent)
	}, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"},
		TTL: 300 * time.Millisecond, Observer: tel.inst}))
	const route = "/sku/:sku/deduct"

	req, w := serveIn(tel, e, httptest.NewRequest("POST", "/sku/42/deduct", nil))
	if w.Code != http.StatusNoContent {
		t.Fatalf("status %d", w.Code)
	}
	checkDecision(t, tel, req, "latchkey.paramlock", "", route, step{outcome: "acquired"})
	pl := tel.childOf(t, req, "latchkey.paramlock").SpanContext()
	for _, name := range []string{"latchkey.acquire", "latchkey.release", "deduct"} {
		tel.childOf(t, pl, name)
	}

	held, err := locks.TryLock(context.Background(), route+"|sku=42")
	if err != nil {
		t.Fatal(err)
	}
	req, w = serveIn(tel, e, httptest.NewRequest("POST", "/sku/42/deduct", nil))
	held.Release(context.Background())
	if w.Code != http.StatusConflict {
		t.Fatalf("status %d with the lock held", w.Code)
	}
	checkDecision(t, tel, req, "latchkey.paramlock", "", route, step{outcome: "locked"})

	lost := make(chan trace.SpanContext, 1)
	go func() {
		r := httptest.NewRequest("POST", "/sku/43/deduct", nil)
		r.Header.Set("X-Lose", "1")
		req, _ := serveIn(tel, e, r)
		lost <- req
	}()
	<-entered
	for _, k := range mr.Keys() {
		if strings.HasSuffix(k, "sku=43}") {
			mr.Del(k)
		}
	}
	req = <-lost
	checkDecision(t, tel, req, "latchkey.paramlock", "", route, step{outcome: "lock_lost", errType: "lost"})
	// core tells the span current at the acquisition: this one.
	if ev := tel.childOf(t, req, "latchkey.paramlock").Events(); len(ev) != 1 || ev[0].Name != "latchkey.lease.lost" {
		t.Errorf("events %v, want latchkey.lease.lost", ev)
	}

	// ParamLock has no metric of its own: its locks are measured by core.
	if _, ok := tel.collect(t)["latchkey.paramlock"]; ok {
		t.Error("a paramlock metric")
	}
	if got := tel.value(t, "latchkey.lock.operation.duration", attribute.String("latchkey.operation.name", "acquire")); got < 3 {
		t.Errorf("%v acquisitions measured by core", got)
	}
}

// TestParamLockCardinality: ParamLock's lock names under the default
// WithLockName come from its Name or route template only: parameter
// values with ':' in them (clients choose them) make no series of their
// own.
func TestParamLockCardinality(t *testing.T) {
	tel := newTelemetry(t)
	locks := mustNew(core.NewMemory(core.WithObserver(tel.inst)))
	t.Cleanup(func() { locks.Close() })
	e := echo.New()
	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	e.POST("/files/*", ok, echomw.ParamLock(locks, "*"))
	e.POST("/stock/:sku", ok, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, Name: "stock"}))
	e.POST("/sku/:sku", ok, echomw.ParamLock(locks, "sku"))
	for i := range 50 {
		for _, target := range []string{
			fmt.Sprintf("/files/u%d:x", i), fmt.Sprintf("/files/u%d%%3Ax", i),
			fmt.Sprintf("/stock/u%d:x", i), fmt.Sprintf("/sku/u%d:x", i),
		} {
			w := httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest("POST", target, nil))
			if w.Code != http.StatusNoContent {
				t.Fatalf("%s: %d", target, w.Code)
			}
		}
	}
	names := map[string]bool{}
	for metric, m := range tel.collect(t) {
		if !strings.HasPrefix(metric, "latchkey.lock.") {
			continue
		}
		for _, p := range points(m) {
			v, _ := p.attrs.Value(name)
			names[v.AsString()] = true
		}
	}
	if len(names) != 2 || !names["_OTHER"] || !names["/sku/"] {
		t.Errorf("lock names %v, want _OTHER (Name \"stock\", /files/*) and /sku/ (the route's part before ':')", slices.Sorted(maps.Keys(names)))
	}
}

// lossTold is an Observer that, after the one it wraps, signals each
// loss on told.
type lossTold struct {
	core.Observer
	told chan<- struct{}
}

func (o lossTold) LeaseLost(ctx context.Context, key string, kind core.Kind, fence int64, held time.Duration, cause error) {
	o.Observer.LeaseLost(ctx, key, kind, fence, held, cause)
	select {
	case o.told <- struct{}{}:
	default:
	}
}
