package echomw_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
)

func TestDailyVoteRouterStyle(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		e := echo.New()
		var log logger
		var d decisions
		now := time.Now()
		e.POST("/vote/:item", func(c echo.Context) error { return c.String(http.StatusOK, "voted") }, log.mw,
			echomw.DailyWithConfig(echomw.DailyConfig{Store: store, Scope: "vote", Subject: tenant,
				Clock: func() time.Time { return now }, OnDecision: d.record}))

		if w := serve(e, "POST", "/vote/9", "", withTenant("u1")); w.Code != http.StatusOK {
			t.Fatalf("first vote: %d", w.Code)
		}
		w := serve(e, "POST", "/vote/9", "", withTenant("u1"))
		isProblem(t, w, http.StatusConflict, httpidem.CodeAlreadyClaimed)
		until := httpidem.DayOf(now, nil).End(nil)
		if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra != int((until.Sub(now)+time.Second-1)/time.Second) {
			t.Fatalf("Retry-After %q, want %v", w.Header().Get("Retry-After"), until.Sub(now))
		}
		if l := log.last(); !errors.Is(l.err, httpidem.ErrAlreadyClaimed) || l.status != http.StatusConflict {
			t.Fatalf("logger saw %+v", l)
		}
		if w := serve(e, "POST", "/vote/10", "", withTenant("u1")); w.Code != http.StatusOK {
			t.Fatalf("another item (default object = route params): %d", w.Code)
		}
		if w := serve(e, "POST", "/vote/9", "", withTenant("u2")); w.Code != http.StatusOK {
			t.Fatalf("another user: %d", w.Code)
		}
		isProblem(t, serve(e, "POST", "/vote/9", ""), http.StatusUnauthorized, httpidem.CodeUnauthenticated)
		if got := d.outcomes(); got != "first duplicate first first unauthenticated" {
			t.Fatalf("decisions %s", got)
		}
		n, err := store.Count(t.Context(), "vote", "9", httpidem.DayOf(now, nil))
		if err != nil || n != 0 {
			t.Fatalf("uncounted gate: Count %d %v", n, err)
		}
	})
}

func TestDailyUnitStyleAndDuplicateHandler(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	e := echo.New()
	mw, err := echomw.DailyConfig{
		Store: store, Scope: "checkin", Subject: tenant,
		DuplicateHandler: func(c echo.Context, who string, err error) error {
			tk, _ := httpidem.TicketFromContext(c.Request().Context())
			return c.String(http.StatusOK, fmt.Sprintf("%s already checked in on %s", who, tk.Day))
		},
	}.ToMiddleware()
	if err != nil {
		t.Fatal(err)
	}
	h := mw(func(c echo.Context) error { return c.String(http.StatusOK, "checked in") })
	var bodies []string
	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		c := e.NewContext(newRequest("POST", "/checkin", "", withTenant("u1")), rec)
		c.SetPath("/checkin")
		if err := h(c); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, rec.Body.String())
	}
	today := httpidem.DayOf(time.Now(), nil)
	if bodies[0] != "checked in" || bodies[1] != "u1 already checked in on "+today.String() {
		t.Fatalf("bodies %q", bodies)
	}
}

func TestDailyReleasesOnErrorAndPanic(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		e := echo.New()
		var d decisions
		runs := 0
		e.POST("/vote/:item", func(c echo.Context) error {
			runs++
			switch runs {
			case 1:
				return errors.New("db down") // Echo answers 500
			case 2:
				panic("boom")
			case 3:
				return echo.NewHTTPError(http.StatusServiceUnavailable, "later")
			}
			return c.String(http.StatusOK, "voted")
		}, recoverMW, echomw.DailyWithConfig(echomw.DailyConfig{Store: store, Scope: "vote", Subject: tenant, OnDecision: d.record}))
		for i, want := range []int{500, 500, 503, 200, 409} {
			if w := serve(e, "POST", "/vote/9", "", withTenant("u1")); w.Code != want {
				t.Fatalf("request %d: %d, want %d", i, w.Code, want)
			}
		}
		if got := d.outcomes(); got != "first released first released first released first duplicate" {
			t.Fatalf("decisions %s", got)
		}
	})
}

func TestDailyCountMode(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		e := echo.New()
		e.GET("/articles/:id", func(c echo.Context) error {
			if c.Param("id") == "404" {
				return echo.ErrNotFound
			}
			return c.String(http.StatusOK, "text")
		}, echomw.DailyWithConfig(echomw.DailyConfig{Store: store, Scope: "read", Mode: httpidem.ModeCount, Subject: tenant}))
		for _, u := range []string{"a", "b", "a", "c", "a"} {
			if w := serve(e, "GET", "/articles/7", "", withTenant(u)); w.Code != http.StatusOK {
				t.Fatalf("count mode blocked a read: %d", w.Code)
			}
			serve(e, "GET", "/articles/404", "", withTenant(u))
		}
		day := httpidem.DayOf(time.Now(), nil)
		if n, err := store.Count(t.Context(), "read", "7", day); n != 3 || err != nil {
			t.Fatalf("readers of 7: %d %v", n, err)
		}
		if n, _ := store.Count(t.Context(), "read", "404", day); n != 0 {
			t.Fatalf("failed reads counted: %d", n)
		}
	})
}

// TestDailyDecodesRouteParams: /vote/J, /vote/%4A and /vote/%4a name one
// item, so a user votes on it once a day however the path is spelt;
// values are joined so that two tuples never make one object, and an
// undecodable value is a 400.
func TestDailyDecodesRouteParams(t *testing.T) {
	eachStore(t, func(t *testing.T, store testStore) {
		e := echo.New()
		now := time.Now()
		voted := func(c echo.Context) error { return c.String(http.StatusOK, "voted") }
		daily := echomw.DailyWithConfig(echomw.DailyConfig{Store: store, Scope: "vote", Subject: tenant,
			Clock: func() time.Time { return now }})
		e.POST("/vote/:item", voted, daily)
		e.POST("/pair/:a/:b", voted, daily)

		if w := serve(e, "POST", "/vote/J", "", withTenant("u1")); w.Code != http.StatusOK {
			t.Fatalf("first vote: %d", w.Code)
		}
		for _, again := range []string{"/vote/%4A", "/vote/%4a", "/vote/J"} {
			isProblem(t, serve(e, "POST", again, "", withTenant("u1")), http.StatusConflict, httpidem.CodeAlreadyClaimed)
		}
		day := httpidem.DayOf(now, nil)
		for obj, want := range map[string]bool{"J": true, "%4A": false, "%4a": false} {
			if first, err := store.Claim(t.Context(), httpidem.ClaimArgs{Scope: "vote", Object: obj, Subject: "u1",
				Day: day, ExpireAt: now.Add(time.Hour), Token: "probe"}); err != nil || first == want {
				t.Errorf("object %q claimed by the votes: %v (err %v), want %v", obj, !first, err, want)
			}
		}

		for _, p := range []string{"/pair/x%2Fy/z", "/pair/x/y%2Fz", "/pair/%25/a", "/pair/%2525/a"} {
			if w := serve(e, "POST", p, "", withTenant("u1")); w.Code != http.StatusOK {
				t.Errorf("%s: %d, want a first vote on its own object", p, w.Code)
			}
		}

		r := newRequest("POST", "/vote/x", "", withTenant("u1"))
		r.URL.RawPath = "/vote/%zz"
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		isProblem(t, w, http.StatusBadRequest, httpidem.CodeInvalidRequest)
	})
}
