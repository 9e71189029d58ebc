package echomw_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
)

// TestLimit: at most Limit requests per route parameter run at once; the
// next gets 429; another parameter value is not limited; a failing Key
// answers 401; a bad configuration panics at start-up.
func TestLimit(t *testing.T) {
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	e := echo.New()
	inside := make(chan struct{})
	gate := make(chan struct{})
	account := func(c echo.Context) (string, error) {
		if a := c.Param("account"); a != "anon" {
			return a, nil
		}
		return "", errors.New("anonymous")
	}
	e.POST("/export/:account", func(c echo.Context) error {
		if c.QueryParam("block") != "" {
			inside <- struct{}{}
			<-gate
		}
		return c.NoContent(http.StatusNoContent)
	}, echomw.Limit(locks, 1, account))
	post := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("POST", path, nil))
		return rec
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post("/export/7?block=1") }()
	<-inside
	isProblem(t, post("/export/7"), http.StatusTooManyRequests, httpidem.CodeLimited)
	if rec := post("/export/8"); rec.Code != http.StatusNoContent {
		t.Fatalf("another account: %d", rec.Code)
	}
	close(gate)
	if rec := <-done; rec.Code != http.StatusNoContent {
		t.Fatalf("the blocked request: %d", rec.Code)
	}
	if rec := post("/export/7"); rec.Code != http.StatusNoContent {
		t.Fatalf("after the permit came back: %d", rec.Code)
	}
	isProblem(t, post("/export/anon"), http.StatusUnauthorized, httpidem.CodeUnauthenticated)
	mustPanic(t, httpidem.ErrInvalidConfig, func() { echomw.Limit(locks, 0, account) })
	mustPanic(t, httpidem.ErrInvalidConfig, func() { echomw.Limit(locks, 1, nil) })
}
