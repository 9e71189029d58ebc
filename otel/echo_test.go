package otel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
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
	locks, _, mr := redisClient(t, tel.inst)
	entered := make(chan struct{}, 1)
	e := echo.New()
	e.POST("/sku/:sku/deduct", func(c echo.Context) error {
		_, span := tel.tp.Tracer("test").Start(c.Request().Context(), "deduct")
		defer span.End()
		if c.Request().Header.Get("X-Lose") != "" {
			entered <- struct{}{}
			select {
			case <-c.Request().Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
		return c.NoContent(http.StatusNoContent)
	}, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locker: locks, Params: []string{"sku"},
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
