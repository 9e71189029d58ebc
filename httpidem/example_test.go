package httpidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/v9"
)

// send posts body to h with an Idempotency-Key and prints the answer.
func send(h http.Handler, key, body string) {
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-Tenant", "acme")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(w.Body.String()))
}

// This example protects an order endpoint with Idempotency-Key on Redis
// (miniredis stands in for the server): the retry gets the stored
// response, the same key with another body gets 422.
func ExampleIdempotency() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	store := must(httpidem.NewRedisStore(rdb))
	defer store.Close()

	orders := 0
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})
	mw := httpidem.Idempotency(httpidem.IdempotencyConfig{
		Store:   store,
		Require: true,
		Principal: func(r *http.Request) (string, error) {
			return r.Header.Get("X-Tenant"), nil // in real life: from your auth middleware
		},
	})
	h := mw(create)

	send(h, "k-1", `{"sku":42}`)
	send(h, "k-1", `{"sku":42}`)
	send(h, "k-1", `{"sku":43}`)
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 422 replayed="" {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used for a different request","code":"idempotency_key_reused"}
	// orders created: 1
}

// This example allows one vote per user per item per day in Berlin time.
func ExampleDaily() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	berlin, _ := time.LoadLocation("Europe/Berlin")

	gate := httpidem.Daily(httpidem.DailyConfig{
		Store:    store,
		Scope:    "vote",
		Location: berlin,
		Subject:  func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		Object:   func(r *http.Request) (string, error) { return r.PathValue("item"), nil },
	})
	mux := http.NewServeMux()
	mux.Handle("POST /vote/{item}", gate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "vote counted")
	})))

	for _, item := range []string{"9", "9", "10"} {
		r := httptest.NewRequest("POST", "/vote/"+item, nil)
		r.Header.Set("X-User", "u42")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(item, w.Code, w.Header().Get("Content-Type"), w.Header().Get("Retry-After") != "")
	}
	// Output:
	// 9 200 text/plain; charset=utf-8 false
	// 9 409 application/problem+json true
	// 10 200 text/plain; charset=utf-8 false
}

// This example counts unique daily readers of an article without ever
// blocking a read.
func ExampleDaily_count() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	reads := httpidem.Daily(httpidem.DailyConfig{
		Store:   store,
		Scope:   "read",
		Mode:    httpidem.ModeCount,
		Subject: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		Object:  func(r *http.Request) (string, error) { return "article-7", nil },
	})
	h := reads(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, u := range []string{"ann", "bob", "ann", "ann"} {
		r := httptest.NewRequest("GET", "/articles/7", nil)
		r.Header.Set("X-User", u)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	n, _ := store.Count(context.Background(), "read", "article-7", httpidem.DayOf(time.Now(), nil))
	fmt.Println("unique readers today:", n)
	// Output:
	// unique readers today: 2
}

// This example uses the once-per-day gate without HTTP, from a job, with an
// injected clock that crosses a Santiago midnight that does not exist.
func ExampleGate_Claim() {
	santiago, _ := time.LoadLocation("America/Santiago")
	now := time.Date(2026, 9, 5, 23, 30, 0, 0, santiago)
	clock := func() time.Time { return now }
	store := must(httpidem.NewMemoryStore(httpidem.WithClock(clock))) // expires claims by the same clock
	defer store.Close()
	gate, err := httpidem.NewGate(httpidem.DailyConfig{
		Store: store, Scope: "reward", Location: santiago, Clock: clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, step := range []time.Duration{0, 0, 30 * time.Minute} {
		now = now.Add(step)
		first, _ := gate.Claim(ctx, "u42", "")
		fmt.Println(now.Format("2006-01-02 15:04 -07"), gate.Today(), first)
	}
	// Output:
	// 2026-09-05 23:30 -04 2026-09-05 true
	// 2026-09-05 23:30 -04 2026-09-05 false
	// 2026-09-06 01:00 -03 2026-09-06 true
}

// This example shows the first instant of a day where local midnight does
// not exist.
func ExampleDay_Start() {
	santiago, _ := time.LoadLocation("America/Santiago")
	d := httpidem.Day{Year: 2026, Month: time.September, Day: 6}
	fmt.Println(d.Start(santiago))
	fmt.Println(d.End(santiago).Sub(d.Start(santiago)))
	// Output:
	// 2026-09-06 01:00:00 -0300 -03
	// 23h0m0s
}

// This example parses Idempotency-Key headers.
func ExampleParseKey() {
	for _, v := range []string{`"8e03978e"`, `8e03978e`, `"a", "b"`} {
		h := http.Header{}
		h.Set("Idempotency-Key", v)
		key, ok, err := httpidem.ParseKey(h, 0)
		fmt.Printf("%q %v %v\n", key, ok, err)
	}
	// Output:
	// "8e03978e" true <nil>
	// "8e03978e" true <nil>
	// "" true httpidem: invalid Idempotency-Key: a list
}

// This example writes a problem answer.
func ExampleWriteProblem() {
	w := httptest.NewRecorder()
	httpidem.WriteProblem(w, &httpidem.Problem{
		Status: http.StatusConflict, Code: httpidem.CodeInFlight,
		Detail: "still working on it", RetryAfter: 1500 * time.Millisecond,
	})
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("Retry-After"), w.Header().Get("Cache-Control"))
	fmt.Println(w.Body)
	// Output:
	// 409 application/problem+json 2 no-store
	// {"type":"about:blank","title":"Conflict","status":409,"detail":"still working on it","code":"request_in_flight"}
}

// This example drives the protocol by hand, as an adapter for another
// framework would (package echomw does this for Echo): every Call says
// what to do with the request.
func ExampleNewIdempotencyGuard() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	g, err := httpidem.NewIdempotencyGuard(httpidem.IdempotencyConfig{Store: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	principal := func(*http.Request) (string, error) { return "acme", nil }
	serve := func(w http.ResponseWriter, r *http.Request) {
		call := g.Begin(r, principal)
		switch call.Action() {
		case httpidem.ActionPass:
			fmt.Fprint(w, "unprotected")
		case httpidem.ActionReplay:
			call.Replay(w)
		case httpidem.ActionRun:
			defer call.Abort() // gives the key up if the handler panics
			fmt.Fprint(call.Writer(w), "created")
			call.Finish(0)
		default:
			httpidem.WriteProblem(w, call.Problem())
		}
	}
	for i := 0; i < 2; i++ {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		serve(w, r)
		fmt.Printf("%d %s replayed=%q\n", w.Code, w.Body, w.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// 200 created replayed=""
	// 200 created replayed="true"
}

// This example locks a net/http route by its {sku} path value with a
// ParamLockGuard: a second request for the same SKU while the first runs
// gets 409.
func ExampleNewParamLockGuard() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	g, err := httpidem.NewParamLockGuard(httpidem.ParamLockConfig{Locks: locks, Name: "deduct"})
	if err != nil {
		fmt.Println(err)
		return
	}
	inner := func(r *http.Request) int { // a request for the same SKU, sent while the first runs
		w := httptest.NewRecorder()
		call := g.Begin(r, "", []httpidem.Param{{Name: "sku", Value: r.PathValue("sku")}})
		if call.Action() != httpidem.ActionRun {
			httpidem.WriteProblem(w, call.Problem())
			return w.Code
		}
		call.Finish(0)
		return http.StatusOK
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sku/{sku}/deduct", func(w http.ResponseWriter, r *http.Request) {
		call := g.Begin(r, "", []httpidem.Param{{Name: "sku", Value: r.PathValue("sku")}})
		if call.Action() != httpidem.ActionRun {
			httpidem.WriteProblem(w, call.Problem())
			return
		}
		defer call.Abort()
		fmt.Println("first:", "running; a second request gets", inner(r))
		call.Finish(0)
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/sku/42/deduct", nil))
	// Output:
	// first: running; a second request gets 409
}

// logObserver prints when a decision starts and how it ends.
type logObserver struct{}

func (logObserver) DecisionStart(ctx context.Context, kind, scope string) (context.Context, func(httpidem.Decision)) {
	fmt.Println("start", kind, scope)
	return ctx, func(d httpidem.Decision) { fmt.Println("end", d.Kind, d.Scope, d.Outcome) }
}

// This example shows when an Observer is called, beside OnDecision: it
// starts before the store is asked, and hears the last decision once —
// for a request that runs, after the handler and the stored response;
// for a 5xx, not stored, after first.
func ExampleObserver() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	mw := httpidem.Idempotency(httpidem.IdempotencyConfig{
		Store: store, Scope: "orders", Observer: logObserver{},
		Principal:  func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
		OnDecision: func(_ context.Context, d httpidem.Decision) { fmt.Println("decided", d.Outcome) },
	})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("handler runs")
		if r.Header.Get("Idempotency-Key") == "k-2" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, key := range []string{"k-1", "k-1", "k-2"} {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("X-Tenant", "acme")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// start idempotency orders
	// decided first
	// handler runs
	// end idempotency orders first
	// start idempotency orders
	// decided replayed
	// end idempotency orders replayed
	// start idempotency orders
	// decided first
	// handler runs
	// decided not_stored
	// end idempotency orders not_stored
}

// This example drives a DailyGuard by hand, as an adapter would, with the
// subject taken per request: the first check-in of the day runs, the
// second is a duplicate.
func ExampleNewDailyGuard() {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	g, err := httpidem.NewDailyGuard(httpidem.DailyConfig{Store: store, Scope: "checkin"})
	if err != nil {
		fmt.Println(err)
		return
	}
	user := func(*http.Request) (string, error) { return "u1", nil }
	for range 2 {
		call := g.Begin(httptest.NewRequest("POST", "/checkin", nil), httpidem.DailyExtractors{Subject: user})
		switch call.Action() {
		case httpidem.ActionRun:
			fmt.Println("checked in")
			call.Finish(http.StatusOK) // keeps the claim
		case httpidem.ActionDuplicate:
			fmt.Println("already checked in:", call.Problem().Status)
		}
	}
	// Output:
	// checked in
	// already checked in: 409
}

// This example allows each tenant one export at a time across the fleet: a
// second export of the same tenant while the first runs gets 429, another
// tenant's runs.
func ExampleLimit() {
	locks, err := core.NewMemory() // core.NewRedis(rdb) across processes
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	started, finish := make(chan struct{}), make(chan struct{})
	export := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("slow") {
			close(started)
			<-finish
		}
		w.WriteHeader(http.StatusAccepted)
	})
	h := httpidem.Limit(httpidem.LimitConfig{
		Locks: locks, Limit: 1, Name: "exports",
		Key: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
	})(export)
	send := func(tenant, target string) int {
		r := httptest.NewRequest("POST", target, nil)
		r.Header.Set("X-Tenant", tenant)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	first := make(chan int)
	go func() { first <- send("acme", "/export?slow") }()
	<-started
	fmt.Println("acme again:", send("acme", "/export"))
	fmt.Println("globex:", send("globex", "/export"))
	close(finish)
	fmt.Println("acme's first:", <-first)
	// Output:
	// acme again: 429
	// globex: 202
	// acme's first: 202
}

// This example stores Idempotency-Key responses in the service's own
// database, in the transaction of the handler's writes: the order and the
// response it produced are committed together, so a crash between the
// two cannot make a retry create the order twice. It needs a database
// driver (here modernc.org/sqlite, imported for its side effect), so it
// is compiled but not run; package httpidem/sqltest runs it.
func ExampleNewSQLStore() {
	// import _ "modernc.org/sqlite"
	db, err := sql.Open("sqlite", "file:shop.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := httpidem.NewSQLStore(db, httpidem.WithHandlerTx(nil))
	if err != nil {
		log.Fatal(err) // a driver whose dialect cannot be told: use WithDialect
	}
	defer store.Close()
	if err := store.Migrate(context.Background()); err != nil { // or run store.DDL() in your migrations
		log.Fatal(err)
	}

	orders := httpidem.Idempotency(httpidem.IdempotencyConfig{
		Store:     store,
		Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
	})
	http.Handle("POST /orders", orders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpidem.TxFromContext(r.Context()) // committed by the middleware with the response
		res, err := tx.ExecContext(r.Context(), "INSERT INTO orders (sku) VALUES (?)", r.FormValue("sku"))
		if err != nil {
			http.Error(w, "could not order", http.StatusInternalServerError) // a 5xx rolls back
			return
		}
		id, _ := res.LastInsertId()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, id)
	})))
}
