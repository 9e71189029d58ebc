package echomw_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
)

// review23: a ParamLock whose lock is lost while the handler runs. The
// handler does what a handler does when its context is cancelled: it
// returns ctx.Err(). The client should hear the 503 lock_lost problem
// (as through httpidem's net/http ParamLock, which writes it when the
// handler wrote nothing), and the error the middleware returns should
// match ErrLost (doc.go: "errors.Is finds ... ErrLost in what the
// middlewares return").
func TestReview23ParamLockLostHandlerReturnsCtxErr(t *testing.T) {
	for _, tc := range []struct {
		name string
		ret  func(c echo.Context) error
	}{
		{"ctx.Err", func(c echo.Context) error { return c.Request().Context().Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr, rdb := startMiniredis(t, true)
			locks := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("r23")))
			defer locks.Close()
			started := make(chan struct{}, 1)
			var returned error
			e := echo.New()
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error { returned = next(c); return returned }
			})
			e.POST("/sku/:sku", func(c echo.Context) error {
				started <- struct{}{}
				<-c.Request().Context().Done()
				return tc.ret(c)
			}, echomw.ParamLockWithConfig(echomw.ParamLockConfig{Locks: locks, Params: []string{"sku"}, TTL: 600 * time.Millisecond}))

			// net/http reference: the same guard through httpidem.
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- serve(e, "POST", "/sku/9", "") }()
			<-started
			mr.Del("r23:{/sku/:sku|sku=9}")
			w := <-done
			t.Logf("echo answered %d %q; returned %v", w.Code, w.Body.String(), returned)
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("lost lock: client got %d %s, want the 503 %s problem", w.Code, w.Body.String(), httpidem.CodeLockLost)
			}
			if !errors.Is(returned, httpidem.ErrLost) && !errors.Is(returned, core.ErrLost) {
				t.Errorf("lost lock: middleware returned %v, which does not match ErrLost", returned)
			}
		})
	}
}

// Same scenario through httpidem's net/http ParamLock, for reference.
func TestReview23ParamLockLostNetHTTPReference(t *testing.T) {
	mr, rdb := startMiniredis(t, true)
	locks := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("r23n")))
	defer locks.Close()
	started := make(chan struct{}, 1)
	g, err := httpidem.NewParamLockGuard(httpidem.ParamLockConfig{Locks: locks, Name: "n", TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := g.Begin(r, "", []httpidem.Param{{Name: "sku", Value: "9"}})
		if call.Action() != httpidem.ActionRun {
			t.Errorf("action %v", call.Action())
			return
		}
		defer call.Abort()
		ww := call.Writer(w)
		started <- struct{}{}
		<-call.Request().Context().Done()
		_ = ww
		if p := call.Finish(0); p != nil {
			httpidem.WriteProblem(w, p)
		}
	})
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
		done <- w
	}()
	<-started
	mr.Del("r23n:{n|sku=9}")
	w := <-done
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("net/http: %d", w.Code)
	}
}

// review23: Daily gives the claim back when the answer is a failure
// (ReleaseOn, default status >= 500). echomw passes Finish the status
// statusOf guesses Echo will send for a returned error; Echo's
// DefaultHTTPErrorHandler sends the code of an *HTTPError's Internal when
// that is an *HTTPError too (echo.go:454-460), statusOf the outer code.
// Here the client gets 503, and the claim is kept: the subject is shut out
// for the day by a request that failed.
func TestReview23DailyStatusOfInternalHTTPError(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	e := echo.New()
	fail := true
	e.POST("/vote/:item", func(c echo.Context) error {
		if fail {
			return echo.NewHTTPError(http.StatusBadRequest, "vote rejected").SetInternal(echo.ErrServiceUnavailable)
		}
		return c.String(http.StatusOK, "voted")
	}, echomw.Daily(store, "vote", tenant))
	w := serve(e, "POST", "/vote/9", "", withTenant("u1"))
	t.Logf("first: %d %s", w.Code, w.Body.String())
	if w.Code < 500 {
		t.Skipf("echo sent %d", w.Code)
	}
	fail = false
	if w := serve(e, "POST", "/vote/9", "", withTenant("u1")); w.Code != http.StatusOK {
		t.Fatalf("after a %d failure the retry got %d %s: the claim was kept", 503, w.Code, w.Body.String())
	}
}
