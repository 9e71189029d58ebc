package echomw_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/echomw"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/v9"
)

func post(e *echo.Echo, target, key, user, body string) {
	r := httptest.NewRequest("POST", target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(w.Body.String()))
}

func userID(c echo.Context) (string, error) { return c.Request().Header.Get("X-User"), nil }

// This example makes an Echo order endpoint idempotent on Redis (miniredis
// stands in for the server).
func ExampleIdempotencyWithConfig() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store := must(httpidem.NewRedisStore(rdb))
	defer store.Close()

	e := echo.New()
	orders := 0
	e.POST("/orders", func(c echo.Context) error {
		orders++
		return c.JSON(http.StatusCreated, map[string]int{"order": orders})
	}, echomw.IdempotencyWithConfig(echomw.IdempotencyConfig{Store: store, Principal: userID}))

	post(e, "/orders", "k-1", "ann", `{"sku":42}`)
	post(e, "/orders", "k-1", "ann", `{"sku":42}`)
	post(e, "/orders", "k-1", "ann", `{"sku":7}`)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 422 replayed="" {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used for a different request","code":"idempotency_key_reused"}
}

// This example is the zero-config form: keys are scoped by the caller's
// Authorization header, so one caller's key never replays for another.
func ExampleIdempotency() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	e := echo.New()
	e.POST("/orders", func(c echo.Context) error {
		return c.String(http.StatusCreated, "order placed")
	}, echomw.Idempotency(store))

	for _, auth := range []string{"Bearer ann", "Bearer ann", "Bearer bob", ""} {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k-1")
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%q: %d replayed=%q\n", auth, w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// "Bearer ann": 201 replayed=""
	// "Bearer ann": 201 replayed="true"
	// "Bearer bob": 201 replayed=""
	// "": 401 replayed=""
}

// This example allows one vote per user per item per day (UTC); the item
// is the route parameter.
func ExampleDaily() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	e := echo.New()
	e.POST("/vote/:item", func(c echo.Context) error {
		return c.String(http.StatusOK, "voted for "+c.Param("item"))
	}, echomw.Daily(store, "vote", userID))

	post(e, "/vote/9", "", "ann", "")
	post(e, "/vote/10", "", "ann", "")
	post(e, "/vote/9", "", "bob", "")
	r := httptest.NewRequest("POST", "/vote/9", nil)
	r.Header.Set("X-User", "ann")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("Retry-After") != "")
	// Output:
	// 200 replayed="" voted for 9
	// 200 replayed="" voted for 10
	// 200 replayed="" voted for 9
	// 409 application/problem+json true
}

// This example serializes stock deductions per SKU: while one request for
// SKU 42 runs, another for SKU 42 gets 409, one for SKU 7 runs.
func ExampleParamLock() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	e := echo.New()
	inside := make(chan struct{})
	release := make(chan struct{})
	e.POST("/sku/:sku/deduct", func(c echo.Context) error {
		if c.Param("sku") == "42" && c.Request().Header.Get("X-User") == "slow" {
			close(inside)
			<-release
		}
		return c.String(http.StatusOK, "deducted "+c.Param("sku"))
	}, echomw.ParamLock(locks, "sku"))

	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest("POST", "/sku/42/deduct", nil)
		r.Header.Set("X-User", "slow")
		e.ServeHTTP(httptest.NewRecorder(), r)
	}()
	<-inside
	post(e, "/sku/42/deduct", "", "fast", "")
	post(e, "/sku/7/deduct", "", "fast", "")
	close(release)
	<-done
	post(e, "/sku/42/deduct", "", "fast", "")
	// Output:
	// 409 replayed="" {"type":"about:blank","title":"Conflict","status":409,"detail":"another request is working on this resource; retry later","code":"resource_locked"}
	// 200 replayed="" deducted 7
	// 200 replayed="" deducted 42
}

// This example allows two reports per account at once: the third
// concurrent report of one account gets 429 with Retry-After.
func ExampleLimit() {
	locks, err := core.NewMemory() // core.NewRedis(rdb) across processes
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	e := echo.New()
	running := make(chan struct{}, 2)
	release := make(chan struct{})
	e.GET("/accounts/:id/report", func(c echo.Context) error {
		if c.QueryParam("slow") != "" {
			running <- struct{}{}
			<-release
		}
		return c.String(http.StatusOK, "report of "+c.Param("id"))
	}, echomw.Limit(locks, 2, func(c echo.Context) (string, error) { return c.Param("id"), nil }))

	get := func(target string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		return w
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { get("/accounts/9/report?slow=1") })
	}
	<-running
	<-running
	w := get("/accounts/9/report")
	fmt.Println(w.Code, w.Header().Get("Retry-After"))
	fmt.Println(get("/accounts/3/report").Body.String())
	close(release)
	wg.Wait()
	// Output:
	// 429 1
	// report of 3
}
