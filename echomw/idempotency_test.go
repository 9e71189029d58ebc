package echomw_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
)

func TestIdempotencyUnitStyle(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		e := echo.New()
		var runs atomic.Int64
		h := func(c echo.Context) error {
			body, _ := io.ReadAll(c.Request().Body)
			c.Response().Header().Set("Set-Cookie", "s=1")
			return c.JSON(http.StatusCreated, map[string]any{"run": runs.Add(1), "body": string(body)})
		}
		mw, err := echomw.IdempotencyConfig{Store: store, Principal: tenant, Require: true}.ToMiddleware()
		if err != nil {
			t.Fatal(err)
		}
		var bodies []string
		for i := 0; i < 2; i++ {
			rec := httptest.NewRecorder()
			c := e.NewContext(newRequest("POST", "/orders", `{"sku":42}`, withKey("k1"), withTenant("A")), rec)
			if err := mw(h)(c); err != nil {
				t.Fatal(err)
			}
			if rec.Code != http.StatusCreated || c.Response().Status != http.StatusCreated {
				t.Fatalf("call %d: %d (echo status %d)", i, rec.Code, c.Response().Status)
			}
			replayed := rec.Header().Get(httpidem.HeaderReplayed)
			if (i == 1) != (replayed == "true") || (i == 1 && rec.Header().Get("Set-Cookie") != "") {
				t.Fatalf("call %d: headers %v", i, rec.Header())
			}
			bodies = append(bodies, rec.Body.String())
		}
		if bodies[0] != bodies[1] || runs.Load() != 1 {
			t.Fatalf("bodies %q, runs %d", bodies, runs.Load())
		}
	})
}

func TestIdempotencyHandlerErrorIsRecordedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		e := echo.New()
		var log logger
		e.Use(log.mw)
		runs := 0
		e.POST("/orders", func(c echo.Context) error {
			runs++
			return echo.NewHTTPError(http.StatusBadRequest, "bad sku")
		}, echomw.IdempotencyWithConfig(echomw.IdempotencyConfig{Store: store, Principal: tenant}))

		first := serve(e, "POST", "/orders", "x", withKey("k"), withTenant("A"))
		if first.Code != http.StatusBadRequest || first.Body.String() != "{\"message\":\"bad sku\"}\n" {
			t.Fatalf("first: %d %q (written twice?)", first.Code, first.Body)
		}
		if l := log.last(); l.status != http.StatusBadRequest || l.err == nil {
			t.Fatalf("logger saw %+v; want status 400 and the handler's error", l)
		}
		again := serve(e, "POST", "/orders", "x", withKey("k"), withTenant("A"))
		if again.Code != first.Code || again.Body.String() != first.Body.String() || again.Header().Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("replay: %d %q %v", again.Code, again.Body, again.Header())
		}
		if l := log.last(); l.status != http.StatusBadRequest || l.err != nil || runs != 1 {
			t.Fatalf("replay logged %+v, runs %d", l, runs)
		}
	})
}

// TestIdempotencyInterop uses one store from net/http and from Echo: a key
// created through one replays through the other.
func TestIdempotencyInterop(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		var runs atomic.Int64
		handler := func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"order":%d}`, runs.Add(1))
		}
		std := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store,
			Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
		})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w) }))
		e := echo.New()
		e.POST("/orders", func(c echo.Context) error { handler(c.Response()); return nil },
			echomw.IdempotencyWithConfig(echomw.IdempotencyConfig{Store: store, Principal: tenant}))

		viaStd := func(key string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			std.ServeHTTP(w, newRequest("POST", "/orders", `{"sku":1}`, withKey(key), withTenant("A")))
			return w
		}
		a := viaStd("from-std")
		b := serve(e, "POST", "/orders", `{"sku":1}`, withKey("from-std"), withTenant("A"))
		c := serve(e, "POST", "/orders", `{"sku":1}`, withKey("from-echo"), withTenant("A"))
		d := viaStd("from-echo")
		if runs.Load() != 2 || b.Header().Get(httpidem.HeaderReplayed) != "true" || d.Header().Get(httpidem.HeaderReplayed) != "true" ||
			a.Body.String() != b.Body.String() || c.Body.String() != d.Body.String() {
			t.Fatalf("runs %d; std→echo %q/%q replayed=%q; echo→std %q/%q replayed=%q", runs.Load(),
				a.Body, b.Body, b.Header().Get(httpidem.HeaderReplayed), c.Body, d.Body, d.Header().Get(httpidem.HeaderReplayed))
		}
	})
}

func TestIdempotencyReturnsErrors(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	e := echo.New()
	started, release := make(chan struct{}), make(chan struct{})
	mw, _ := echomw.IdempotencyConfig{Store: store, Principal: tenant, Require: true}.ToMiddleware()
	slow := mw(func(c echo.Context) error {
		close(started)
		<-release
		return c.NoContent(http.StatusCreated)
	})
	done := make(chan error, 1)
	go func() {
		done <- slow(e.NewContext(newRequest("POST", "/pay", "x", withKey("k"), withTenant("A")), httptest.NewRecorder()))
	}()
	<-started

	cases := []struct {
		opts     []reqOpt
		body     string
		status   int
		code     string
		sentinel error
	}{
		{[]reqOpt{withKey("k"), withTenant("A")}, "x", http.StatusConflict, httpidem.CodeInFlight, httpidem.ErrInFlight},
		{[]reqOpt{withKey("k"), withTenant("A")}, "y", http.StatusUnprocessableEntity, httpidem.CodeKeyReused, httpidem.ErrKeyReused},
		{[]reqOpt{withTenant("A")}, "x", http.StatusBadRequest, httpidem.CodeKeyMissing, httpidem.ErrKeyMissing},
		{[]reqOpt{withKey("k")}, "x", http.StatusUnauthorized, httpidem.CodeUnauthenticated, httpidem.ErrUnauthenticated},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		err := slow(e.NewContext(newRequest("POST", "/pay", tc.body, tc.opts...), rec))
		var he *echo.HTTPError
		if !errors.As(err, &he) || he.Code != tc.status || !errors.Is(err, tc.sentinel) {
			t.Fatalf("returned %v; want an *echo.HTTPError %d matching %v", err, tc.status, tc.sentinel)
		}
		isProblem(t, rec, tc.status, tc.code)
		if tc.status == http.StatusConflict && rec.Header().Get("Retry-After") == "" {
			t.Fatal("409 without Retry-After")
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// countingStore counts Begin calls.
type countingStore struct {
	testStore
	begins atomic.Int64
}

func (s *countingStore) Begin(ctx context.Context, a httpidem.BeginArgs) (httpidem.Begun, error) {
	s.begins.Add(1)
	return s.testStore.Begin(ctx, a)
}

func TestIdempotencySkipper(t *testing.T) {
	mem := must(httpidem.NewMemoryStore())
	defer mem.Close()
	store := &countingStore{testStore: mem}
	e := echo.New()
	e.POST("/orders", func(c echo.Context) error { return c.NoContent(http.StatusCreated) },
		echomw.IdempotencyWithConfig(echomw.IdempotencyConfig{Store: store, Principal: tenant,
			Skipper: func(c echo.Context) bool { return c.Request().Header.Get("X-Internal") == "1" }}))
	for i := 0; i < 3; i++ {
		if w := serve(e, "POST", "/orders", "x", withKey("k"), withTenant("A"), withHeader("X-Internal", "1")); w.Code != http.StatusCreated {
			t.Fatalf("skipped request: %d", w.Code)
		}
	}
	if store.begins.Load() != 0 {
		t.Fatalf("skipped requests reached the store %d times", store.begins.Load())
	}
	serve(e, "POST", "/orders", "x", withKey("k"), withTenant("A"))
	if store.begins.Load() != 1 {
		t.Fatalf("store calls %d, want 1", store.begins.Load())
	}
}

// TestIdempotencyWithRecoverAndLogger composes the middleware with Recover
// and a logger, in both orders: a panic gives the key up, and the status
// logged is the status sent.
func TestIdempotencyWithRecoverAndLogger(t *testing.T) {
	for _, order := range []string{"recover outside", "recover inside"} {
		t.Run(order, func(t *testing.T) {
			store := must(httpidem.NewMemoryStore())
			defer store.Close()
			e := echo.New()
			var log logger
			idem := echomw.IdempotencyWithConfig(echomw.IdempotencyConfig{Store: store, Principal: tenant})
			runs := 0
			h := func(c echo.Context) error {
				runs++
				if runs == 1 {
					panic("boom")
				}
				return c.String(http.StatusCreated, "ok")
			}
			if order == "recover outside" {
				e.POST("/x", h, log.mw, recoverMW, idem)
			} else {
				e.POST("/x", h, log.mw, idem, recoverMW)
			}
			w1 := serve(e, "POST", "/x", "b", withKey("k"), withTenant("A"))
			if l := log.last(); w1.Code != http.StatusInternalServerError || l.status != w1.Code {
				t.Fatalf("panic: sent %d, logged %+v", w1.Code, l)
			}
			w2 := serve(e, "POST", "/x", "b", withKey("k"), withTenant("A"))
			if l := log.last(); order == "recover outside" && (w2.Code != http.StatusCreated || runs != 2 || l.status != w2.Code) {
				t.Fatalf("retry after a panic: %d runs %d logged %+v", w2.Code, runs, l)
			}
			if order == "recover inside" {
				// Recover turned the panic into a 500 the middleware saw:
				// a 5xx is not stored, so the retry runs again.
				if w2.Code != http.StatusCreated || runs != 2 {
					t.Fatalf("retry after a recovered panic: %d runs %d", w2.Code, runs)
				}
			}
		})
	}
}

// TestConfigErrors: ToMiddleware returns a config mistake as an error;
// the constructors panic with it at start-up, never a 500 per request.
func TestConfigErrors(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	if _, err := (echomw.IdempotencyConfig{}).ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
		t.Fatalf("nil store: %v", err)
	}
	if _, err := (echomw.DailyConfig{Store: store, Scope: "vote"}).ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
		t.Fatalf("nil Subject: %v", err)
	}
	if _, err := (echomw.ParamLockConfig{Params: []string{"sku"}}).ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
		t.Fatalf("nil Locks: %v", err)
	}
	for name, f := range map[string]func(){
		"idempotency": func() { echomw.Idempotency(nil) },
		"daily":       func() { echomw.Daily(store, "bad\nscope", tenant) },
		"paramlock":   func() { echomw.ParamLock(nil, "sku") },
		"no params":   func() { echomw.ParamLock(mustNew(core.NewMemory())) },
	} {
		t.Run(name, func(t *testing.T) { mustPanic(t, httpidem.ErrInvalidConfig, f) })
	}
}

// TestTypedNilStore: a nil *httpidem.MemoryStore or *httpidem.RedisStore is
// the configuration error of a nil Store, from ToMiddleware and as the
// constructors' panic — never a nil-pointer panic.
func TestTypedNilStore(t *testing.T) {
	_, wantIdem := echomw.IdempotencyConfig{}.ToMiddleware()
	_, wantDaily := echomw.DailyConfig{Scope: "vote", Subject: tenant}.ToMiddleware()
	if !errors.Is(wantIdem, httpidem.ErrInvalidConfig) || !errors.Is(wantDaily, httpidem.ErrInvalidConfig) {
		t.Fatalf("nil Store: %v, %v", wantIdem, wantDaily)
	}
	for name, store := range map[string]testStore{
		"*MemoryStore": (*httpidem.MemoryStore)(nil),
		"*RedisStore":  (*httpidem.RedisStore)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := (echomw.IdempotencyConfig{Store: store}).ToMiddleware(); err == nil || err.Error() != wantIdem.Error() {
				t.Errorf("Idempotency: %v, want %v", err, wantIdem)
			}
			if _, err := (echomw.DailyConfig{Store: store, Scope: "vote", Subject: tenant}).ToMiddleware(); err == nil || err.Error() != wantDaily.Error() {
				t.Errorf("Daily: %v, want %v", err, wantDaily)
			}
			if e := mustPanic(t, httpidem.ErrInvalidConfig, func() { echomw.Idempotency(store) }); e.Error() != wantIdem.Error() {
				t.Errorf("Idempotency panicked with %v, want %v", e, wantIdem)
			}
			if e := mustPanic(t, httpidem.ErrInvalidConfig, func() { echomw.Daily(store, "vote", tenant) }); e.Error() != wantDaily.Error() {
				t.Errorf("Daily panicked with %v, want %v", e, wantDaily)
			}
		})
	}
}
