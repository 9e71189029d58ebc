package echomw_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
)

// obsKey marks the context an Observer returned.
type obsKey struct{}

// recObserver records observations: each DecisionStart marks its context
// with "kind/scope", and each end func records the decision, once.
type recObserver struct {
	t      *testing.T
	mu     sync.Mutex
	starts int
	ends   []string // "kind/scope outcome"
}

func (o *recObserver) DecisionStart(ctx context.Context, kind, scope string) (context.Context, func(httpidem.Decision)) {
	o.mu.Lock()
	o.starts++
	o.mu.Unlock()
	called := false
	return context.WithValue(ctx, obsKey{}, kind+"/"+scope), func(d httpidem.Decision) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if called {
			o.t.Errorf("end called twice: %v", d.Outcome)
		}
		called = true
		o.ends = append(o.ends, d.Kind+"/"+d.Scope+" "+string(d.Outcome))
	}
}

func (o *recObserver) state() (int, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.starts, slices.Clone(o.ends)
}

// marked is a handler that fails the test unless its context is the
// Observer's, and answers 200 (or 500 with X-Fail, or panics with X-Panic).
func marked(t *testing.T, want string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if got := c.Request().Context().Value(obsKey{}); got != want {
			t.Errorf("handler context mark %v, want %q", got, want)
		}
		switch {
		case c.Request().Header.Get("X-Panic") != "":
			panic("boom")
		case c.Request().Header.Get("X-Fail") != "":
			return errors.New("db down")
		}
		return c.String(http.StatusOK, "ok")
	}
}

// unmarked is middleware that fails the test if the request it sees after
// the inner middleware returns still carries the Observer's context.
func unmarked(t *testing.T) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			if got := c.Request().Context().Value(obsKey{}); got != nil {
				t.Errorf("request left with the Observer's context (%v)", got)
			}
			return err
		}
	}
}

// TestObserverEcho: every echomw config hands its Observer the decisions,
// the handler runs with the Observer's context, and the request is
// restored afterwards.
func TestObserverEcho(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	locks := mustNew(core.NewMemory())
	t.Cleanup(func() { locks.Close() })
	obs := &recObserver{t: t}
	var d decisions
	e := echo.New()
	e.POST("/orders", marked(t, "idempotency/orders"), unmarked(t),
		echomw.IdempotencyWithConfig(echomw.IdempotencyConfig{Store: store, Observer: obs, Scope: "orders", Principal: tenant}))
	e.POST("/vote/:item", marked(t, "daily/vote"), recoverMW, unmarked(t),
		echomw.DailyWithConfig(echomw.DailyConfig{Store: store, Scope: "vote", Subject: tenant, Observer: obs, OnDecision: d.record}))
	e.POST("/sku/:sku/deduct", marked(t, "paramlock//sku/:sku/deduct"), recoverMW, unmarked(t),
		echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, Observer: obs}))

	serve(e, "POST", "/orders", "a", withKey("k"), withTenant("u1"))
	serve(e, "POST", "/orders", "a", withKey("k"), withTenant("u1"))
	serve(e, "POST", "/vote/9", "", withTenant("u1"))
	serve(e, "POST", "/vote/9", "", withTenant("u1"))
	serve(e, "POST", "/vote/8", "", withTenant("u1"), withHeader("X-Fail", "1"))
	serve(e, "POST", "/vote/7", "", withTenant("u1"), withHeader("X-Panic", "1"))
	serve(e, "POST", "/vote/9", "")
	serve(e, "POST", "/sku/42/deduct", "")
	serve(e, "POST", "/sku/42/deduct", "", withHeader("X-Panic", "1"))
	held, err := locks.TryLock(context.Background(), "/sku/:sku/deduct|sku=42")
	if err != nil {
		t.Fatal(err)
	}
	serve(e, "POST", "/sku/42/deduct", "")
	held.Release(context.Background())
	serve(e, "POST", "/sku/%0A/deduct", "")

	starts, ends := obs.state()
	want := []string{
		"idempotency/orders first", "idempotency/orders replayed",
		"daily/vote first", "daily/vote duplicate", "daily/vote released", "daily/vote released", "daily/vote unauthenticated",
		"paramlock//sku/:sku/deduct acquired", "paramlock//sku/:sku/deduct acquired",
		"paramlock//sku/:sku/deduct locked", "paramlock//sku/:sku/deduct invalid",
	}
	if starts != len(want) || !slices.Equal(ends, want) {
		t.Errorf("%d starts, ends:\n%q\nwant:\n%q", starts, ends, want)
	}
	if got := d.outcomes(); got != "first duplicate first released first released unauthenticated" {
		t.Errorf("OnDecision %s", got)
	}
}
