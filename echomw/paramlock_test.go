package echomw_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
)

func TestParamLockOneAtATime(t *testing.T) {
	eachLocker(t, func(t *testing.T, locks *core.Client, _ *miniredis.Miniredis) {
		e := echo.New()
		var inside, maxInside, runs atomic.Int64
		e.POST("/sku/:sku/deduct", func(c echo.Context) error {
			n := inside.Add(1)
			defer inside.Add(-1)
			for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
			}
			time.Sleep(2 * time.Millisecond) // the read-modify-write a lock protects
			runs.Add(1)
			return c.NoContent(http.StatusOK)
		}, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, WaitTimeout: 30 * time.Second}))
		const n = 20
		var wg sync.WaitGroup
		codes := make(chan int, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes <- serve(e, "POST", "/sku/42/deduct", "").Code
			}()
		}
		wg.Wait()
		close(codes)
		for c := range codes {
			if c != http.StatusOK {
				t.Fatalf("a waiter got %d", c)
			}
		}
		if maxInside.Load() != 1 || runs.Load() != n {
			t.Fatalf("max concurrent %d (want 1), runs %d (want %d)", maxInside.Load(), runs.Load(), n)
		}
	})
}

func TestParamLockDifferentValuesInParallel(t *testing.T) {
	eachLocker(t, func(t *testing.T, locks *core.Client, _ *miniredis.Miniredis) {
		e := echo.New()
		arrived := map[string]chan struct{}{"1": make(chan struct{}), "2": make(chan struct{})}
		e.POST("/sku/:sku/deduct", func(c echo.Context) error {
			me, other := c.Param("sku"), map[string]string{"1": "2", "2": "1"}[c.Param("sku")]
			close(arrived[me])
			select { // both hold their lock at the same time, or this times out
			case <-arrived[other]:
				return c.NoContent(http.StatusOK)
			case <-time.After(10 * time.Second):
				return c.NoContent(http.StatusGatewayTimeout)
			}
		}, echomw.ParamLock(locks, "sku"))
		var wg sync.WaitGroup
		for _, sku := range []string{"1", "2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w := serve(e, "POST", "/sku/"+sku+"/deduct", ""); w.Code != http.StatusOK {
					t.Errorf("sku %s: %d", sku, w.Code)
				}
			}()
		}
		wg.Wait()
	})
}

func TestParamLockNoWaitConflict(t *testing.T) {
	eachLocker(t, func(t *testing.T, locks *core.Client, _ *miniredis.Miniredis) {
		e := echo.New()
		var log logger
		started, release := make(chan struct{}), make(chan struct{})
		e.POST("/sku/:sku/deduct", func(c echo.Context) error {
			if c.Request().Header.Get("X-Slow") != "" {
				close(started)
				<-release
			}
			return c.NoContent(http.StatusOK)
		}, log.mw, echomw.ParamLock(locks, "sku"))
		done := make(chan struct{})
		go func() {
			defer close(done)
			serve(e, "POST", "/sku/42/deduct", "", withHeader("X-Slow", "1"))
		}()
		<-started
		// The lock is named by the route template and the value.
		info, err := locks.Inspect(context.Background(), "/sku/:sku/deduct|sku=42")
		if err != nil || !info.Held {
			t.Fatalf("lock %q not held: %+v %v", "/sku/:sku/deduct|sku=42", info, err)
		}
		w := serve(e, "POST", "/sku/42/deduct", "")
		isProblem(t, w, http.StatusConflict, httpidem.CodeLocked)
		if w.Header().Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
		}
		if l := log.last(); !errors.Is(l.err, httpidem.ErrLocked) || l.status != http.StatusConflict {
			t.Fatalf("logger saw %+v", l)
		}
		if w := serve(e, "POST", "/sku/43/deduct", ""); w.Code != http.StatusOK {
			t.Fatalf("another sku: %d", w.Code)
		}
		close(release)
		<-done
	})
}

func TestParamLockReleasedOnEveryPath(t *testing.T) {
	eachLocker(t, func(t *testing.T, locks *core.Client, _ *miniredis.Miniredis) {
		e := echo.New()
		var d decisions
		e.POST("/sku/:sku/deduct", func(c echo.Context) error {
			switch c.Request().Header.Get("X-Mode") {
			case "error":
				return echo.NewHTTPError(http.StatusInternalServerError, "db down")
			case "panic":
				panic("boom")
			}
			return c.NoContent(http.StatusOK)
		}, recoverMW, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, OnDecision: d.record}))
		for _, mode := range []string{"ok", "error", "panic", "ok"} {
			want := map[string]int{"ok": 200, "error": 500, "panic": 500}[mode]
			if w := serve(e, "POST", "/sku/7/deduct", "", withHeader("X-Mode", mode)); w.Code != want {
				t.Fatalf("%s: %d, want %d (lock left held?)", mode, w.Code, want)
			}
			info, _ := locks.Inspect(context.Background(), "/sku/:sku/deduct|sku=7")
			if info.Held {
				t.Fatalf("lock held after %s", mode)
			}
		}
		if got := d.outcomes(); got != "acquired acquired acquired acquired" {
			t.Fatalf("decisions %s", got)
		}
	})
}

func TestParamLockRenewsAndLoses(t *testing.T) {
	mr, rdb := startMiniredis(t, true) // keys age in real time
	locks := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("pl")))
	defer locks.Close()
	const ttl = 600 * time.Millisecond
	e := echo.New()
	var d decisions
	started, release := make(chan struct{}, 1), make(chan struct{})
	causes := make(chan error, 1)
	e.POST("/sku/:sku/deduct", func(c echo.Context) error {
		started <- struct{}{}
		var done <-chan struct{}
		if c.Param("sku") == "1" {
			done = release
		}
		select {
		case <-done:
			return c.NoContent(http.StatusOK)
		case <-c.Request().Context().Done():
			causes <- context.Cause(c.Request().Context())
			return c.Request().Context().Err()
		}
	}, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, TTL: ttl, OnDecision: d.record}))

	// Renewed: a handler running for several TTLs keeps the lock.
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serve(e, "POST", "/sku/1/deduct", "") }()
	<-started
	time.Sleep(4 * ttl)
	isProblem(t, serve(e, "POST", "/sku/1/deduct", ""), http.StatusConflict, httpidem.CodeLocked)
	close(release)
	if w := <-done; w.Code != http.StatusOK {
		t.Fatalf("long handler: %d", w.Code)
	}

	// Lost: the lease disappears; the handler's context is cancelled.
	go func() { done <- serve(e, "POST", "/sku/2/deduct", "") }()
	<-started
	mr.Del("pl:{/sku/:sku/deduct|sku=2}")
	if cause := <-causes; !errors.Is(cause, core.ErrLost) {
		t.Fatalf("cause %v, want core.ErrLost", cause)
	}
	if w := <-done; w.Code == http.StatusOK {
		t.Fatalf("a request whose lock was lost answered 200")
	}
	if got := d.outcomes(); !strings.HasSuffix(got, "acquired lock_lost") {
		t.Fatalf("decisions %s", got)
	}
}

func TestParamLockValidatesValues(t *testing.T) {
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	e := echo.New()
	mw, err := echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}}.ToMiddleware()
	if err != nil {
		t.Fatal(err)
	}
	h := mw(func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	call := func(path string, names []string, values ...string) (*httptest.ResponseRecorder, error) {
		rec := httptest.NewRecorder()
		c := e.NewContext(httptest.NewRequest("POST", "/", nil), rec)
		c.SetPath(path)
		c.SetParamNames(names...)
		c.SetParamValues(values...)
		return rec, h(c)
	}
	for _, bad := range []string{"", "a\x00b", "a\nb", "a\xffb", strings.Repeat("x", 129)} {
		rec, err := call("/sku/:sku/deduct", []string{"sku"}, bad)
		if !errors.Is(err, httpidem.ErrInvalidParam) {
			t.Fatalf("value %q: %v", bad, err)
		}
		isProblem(t, rec, http.StatusBadRequest, httpidem.CodeInvalidRequest)
	}
	for _, good := range []string{strings.Repeat("x", 128), "a{b", "a}b", "ü|=:%"} {
		if rec, err := call("/sku/:sku/deduct", []string{"sku"}, good); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("value %q: %v", good, err)
		}
	}
	// A route without the parameter is a programming error: its request
	// panics, naming the route and the parameter (Recover logs it).
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `"/items/:id"`) || !strings.Contains(fmt.Sprint(r), `"sku"`) {
				t.Fatalf("route without the parameter: panic %v, want one naming the route and sku", r)
			}
		}()
		call("/items/:id", []string{"id"}, "1")
	}()
}

func TestParamLockBackendDown(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redisClientFailingFast(t, mr.Addr())
	mr.Close()
	locks := mustNew(core.NewRedis(rdb))
	defer locks.Close()
	e := echo.New()
	e.POST("/sku/:sku/deduct", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, echomw.ParamLock(locks, "sku"))
	isProblem(t, serve(e, "POST", "/sku/1/deduct", ""), http.StatusServiceUnavailable, httpidem.CodeUnavailable)
}

// holdWhile serves target on e in the background with X-Slow set, returns
// once its handler runs (holding its lock), and a func that lets it finish
// and returns its status.
func holdWhile(t *testing.T, e *echo.Echo, started <-chan struct{}, release chan<- struct{}, target string) func() int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- serve(e, "POST", target, "", withHeader("X-Slow", "1")).Code }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: handler never ran", target)
	}
	return func() int {
		release <- struct{}{}
		return <-done
	}
}

// slowRoute registers path with ParamLock(params) and a handler that, for
// requests with X-Slow, signals started and waits for release.
func slowRoute(e *echo.Echo, locks *core.Client, path string, params ...string) (started chan struct{}, release chan struct{}) {
	started, release = make(chan struct{}, 1), make(chan struct{})
	e.POST(path, func(c echo.Context) error {
		if c.Request().Header.Get("X-Slow") != "" {
			started <- struct{}{}
			<-release
		}
		return c.NoContent(http.StatusOK)
	}, echomw.ParamLock(locks, params...))
	return started, release
}

// TestParamLockDecodesValues: /sku/A, /sku/%41 and /sku/%61 name SKUs as
// the request means them, so the first two take one lock — two handlers
// never work on SKU A at once — and an undecodable value is a 400.
func TestParamLockDecodesValues(t *testing.T) {
	eachLocker(t, func(t *testing.T, locks *core.Client, _ *miniredis.Miniredis) {
		e := echo.New()
		started, release := slowRoute(e, locks, "/sku/:sku", "sku")
		finish := holdWhile(t, e, started, release, "/sku/A")
		isProblem(t, serve(e, "POST", "/sku/%41", ""), http.StatusConflict, httpidem.CodeLocked)
		if w := serve(e, "POST", "/sku/%61", ""); w.Code != http.StatusOK {
			t.Errorf("/sku/%%61 (SKU a) while A is held: %d", w.Code)
		}
		if code := finish(); code != http.StatusOK {
			t.Fatalf("holder: %d", code)
		}

		finish = holdWhile(t, e, started, release, "/sku/%41")
		isProblem(t, serve(e, "POST", "/sku/A", ""), http.StatusConflict, httpidem.CodeLocked)
		finish()

		// Echo routes on URL.RawPath when it is set; one that does not
		// decode is a bad request, not a lock of its own.
		r := newRequest("POST", "/sku/x", "")
		r.URL.RawPath = "/sku/%zz"
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		isProblem(t, w, http.StatusBadRequest, httpidem.CodeInvalidRequest)
	})
}

// TestParamLockValuesJoinUnambiguously: values holding the key's
// separators ('|', '=', ':', '%') cannot make two tuples share a lock.
func TestParamLockValuesJoinUnambiguously(t *testing.T) {
	eachLocker(t, func(t *testing.T, locks *core.Client, _ *miniredis.Miniredis) {
		e := echo.New()
		started, release := slowRoute(e, locks, "/pair/:a/:b", "a", "b")
		pairs := [][2]string{ // each held, then the other of its row tried
			{"/pair/1%7Cb=2/3", "/pair/1/2%7Cb=3"},
			{"/pair/1|b=2/3", "/pair/1/2|b=3"},
			{"/pair/x%3D/y", "/pair/x/%3Dy"},
			{"/pair/%2525/x", "/pair/%25/x"},
		}
		for _, p := range pairs {
			finish := holdWhile(t, e, started, release, p[0])
			if w := serve(e, "POST", p[1], ""); w.Code != http.StatusOK {
				t.Errorf("%s while %s is held: %d %s", p[1], p[0], w.Code, w.Body)
			}
			if code := finish(); code != http.StatusOK {
				t.Fatalf("holder %s: %d", p[0], code)
			}
		}
		// The same tuple, spelt differently, is the same lock.
		finish := holdWhile(t, e, started, release, "/pair/1%7Cb=2/3")
		isProblem(t, serve(e, "POST", "/pair/1|b=2/3", ""), http.StatusConflict, httpidem.CodeLocked)
		finish()
	})
}
