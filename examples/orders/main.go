// Command orders shows httpidem on a service that has a database and no
// Redis: an order endpoint behind Idempotency-Key whose handler inserts
// the order in the transaction that also stores its response
// (httpidem.NewSQLStore with WithHandlerTx, httpidem.TxFromContext), and
// a once-a-day check-in on the same store. A scripted client then sends
// an order and its retry, an order whose handler crashes after inserting
// it — nothing is committed, and its retry orders once — two copies of
// one order at once, and two check-ins.
//
//	cd examples && go run ./orders                  # embedded SQLite
//	cd examples && go run ./orders -trace           # ... printing spans and metrics
//	cd examples && DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go run ./orders
//	cd examples && DATABASE_URL=mysql://root@127.0.0.1:3306/test go run ./orders
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/latchkey/latchkey/httpidem"
)

func main() {
	traceOn := flag.Bool("trace", false, "print OpenTelemetry spans (stdout exporter) and a metrics summary")
	flag.Parse()
	tel, err := demo.SetupTelemetry("examples/orders", *traceOn)
	if err != nil {
		log.Fatal(err)
	}
	defer tel.Report()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	db, where, closeDB, err := demo.SQL()
	if err != nil {
		log.Fatal(err)
	}
	defer closeDB()
	fmt.Println("using", where)

	// Tables of this run only, dropped at the end, so that runs against a
	// shared server never meet.
	run := strings.ToLower(rand.Text()[:8])
	idemTable, claimsTable, ordersTable := "demo_idem_"+run, "demo_claims_"+run, "demo_orders_"+run
	defer drop(db, idemTable, claimsTable, ordersTable)
	store, err := httpidem.NewSQLStore(db, httpidem.WithTables(idemTable, claimsTable), httpidem.WithHandlerTx(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+ordersTable+
		" (id VARCHAR(32) NOT NULL PRIMARY KEY, sku VARCHAR(64) NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	var obs httpidem.Observer // stays a nil interface without -trace
	if tel.Inst != nil {
		obs = tel.Inst
	}
	srv, err := newServer(store, ordersTable, obs)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv.mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()

	// A connection per request: Go's transport retries, on its own, a
	// request with an Idempotency-Key whose reused connection drops — the
	// crash below would then run twice.
	c := &client{base: "http://" + ln.Addr().String(), http: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true}}}
	ok := c.script(ctx, srv, db, ordersTable)
	if !ok {
		os.Exit(1)
	}
}

// server is the demo service.
type server struct {
	mux       *http.ServeMux
	insert    string
	slowStart chan struct{} // closed when a slow order starts (for the script)
	mu        sync.Mutex
	runs      map[string]int // handler runs per Idempotency-Key
}

// user plays the part of an authentication middleware: the caller's ID.
func user(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, nil
	}
	return "", errors.New("not logged in")
}

func newServer(store *httpidem.SQLStore, ordersTable string, obs httpidem.Observer) (*server, error) {
	insert := "INSERT INTO " + ordersTable + " (id, sku) VALUES (?, ?)"
	if store.Dialect() == httpidem.Postgres {
		insert = "INSERT INTO " + ordersTable + " (id, sku) VALUES ($1, $2)"
	}
	s := &server{mux: http.NewServeMux(), insert: insert, slowStart: make(chan struct{}), runs: map[string]int{}}

	orders, err := httpidem.IdempotencyConfig{Store: store, Require: true, Principal: user, Scope: "orders",
		Observer: obs}.ToMiddleware()
	if err != nil {
		return nil, err
	}
	s.mux.Handle("POST /orders", orders(http.HandlerFunc(s.createOrder)))

	checkin, err := httpidem.DailyConfig{Store: store, Scope: "checkin", Subject: user, Observer: obs}.ToMiddleware()
	if err != nil {
		return nil, err
	}
	s.mux.Handle("POST /checkin", checkin(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "checked in, +10 points")
	})))
	return s, nil
}

// createOrder inserts the order in the request's transaction; the
// middleware stores the response in it and commits both.
func (s *server) createOrder(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.runs[r.Header.Get("Idempotency-Key")]++
	s.mu.Unlock()
	tx, ok := httpidem.TxFromContext(r.Context())
	if !ok {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	sku := r.FormValue("sku")
	id := "ord_" + strings.ToLower(rand.Text()[:8])
	if _, err := tx.ExecContext(r.Context(), s.insert, id, sku); err != nil {
		http.Error(w, "could not order: "+err.Error(), http.StatusInternalServerError)
		return
	}
	switch r.Header.Get("X-Demo") {
	case "crash":
		// The process "dies" after the insert: the handler never answers.
		panic(http.ErrAbortHandler)
	case "slow":
		close(s.slowStart)
		time.Sleep(300 * time.Millisecond)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%q,"sku":%q}`, id, sku)
}

func (s *server) handlerRuns(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[key]
}

// client runs the script against the service.
type client struct {
	base string
	http *http.Client
}

// post sends a form; it returns the status and body, or the error of a
// request whose connection was dropped.
func (c *client) post(ctx context.Context, path, key, demo, form string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, strings.NewReader(form))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-User", "ada")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if demo != "" {
		req.Header.Set("X-Demo", demo)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		return resp.StatusCode, "(replayed) " + string(body), nil
	}
	return resp.StatusCode, string(body), nil
}

// script runs the story and reports whether every answer was the
// expected one.
func (c *client) script(ctx context.Context, s *server, db *sql.DB, ordersTable string) bool {
	ok := true
	step := func(what string, want int, status int, body string, err error) {
		mark := "ok "
		if status != want {
			mark, ok = "BAD", false
		}
		if err != nil {
			body = "connection dropped: " + err.Error()
		}
		fmt.Printf("%s %-44s -> %d %s\n", mark, what, status, strings.TrimSpace(body))
	}
	orders := func() int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+ordersTable).Scan(&n); err != nil {
			log.Fatal(err)
		}
		return n
	}

	fmt.Println("\n-- an order, then its retry")
	st, b, err := c.post(ctx, "/orders", "order-1", "", "sku=kettle")
	step("POST /orders  key order-1", http.StatusCreated, st, b, err)
	st, b, err = c.post(ctx, "/orders", "order-1", "", "sku=kettle")
	step("POST /orders  key order-1 again", http.StatusCreated, st, b, err)

	fmt.Println("\n-- the handler crashes after inserting the order")
	st, b, err = c.post(ctx, "/orders", "order-2", "crash", "sku=teapot")
	step("POST /orders  key order-2 (crashes)", 0, st, b, err)
	fmt.Printf("    orders in the database: %d (the crashed one was rolled back with its transaction)\n", orders())
	st, b, err = c.post(ctx, "/orders", "order-2", "", "sku=teapot")
	step("POST /orders  key order-2, retried", http.StatusCreated, st, b, err)
	st, b, err = c.post(ctx, "/orders", "order-2", "", "sku=teapot")
	step("POST /orders  key order-2, retried again", http.StatusCreated, st, b, err)

	fmt.Println("\n-- two copies of one order at once")
	type answer struct {
		status int
		body   string
		err    error
	}
	first := make(chan answer, 1)
	go func() {
		st, b, err := c.post(ctx, "/orders", "order-3", "slow", "sku=cup")
		first <- answer{st, b, err}
	}()
	select {
	case <-s.slowStart:
	case <-ctx.Done():
		log.Fatal("the slow order never started")
	}
	st, b, err = c.post(ctx, "/orders", "order-3", "", "sku=cup")
	step("POST /orders  key order-3 (a copy, meanwhile)", http.StatusConflict, st, b, err)
	a := <-first
	step("POST /orders  key order-3 (the first)", http.StatusCreated, a.status, a.body, a.err)

	fmt.Println("\n-- a check-in a day, on the same store")
	st, b, err = c.post(ctx, "/checkin", "", "", "")
	step("POST /checkin", http.StatusOK, st, b, err)
	st, b, err = c.post(ctx, "/checkin", "", "", "")
	step("POST /checkin again", http.StatusConflict, st, b, err)

	n := orders()
	fmt.Printf("\nhandler runs: order-1 %d, order-2 %d (one crashed), order-3 %d; orders in the database: %d\n",
		s.handlerRuns("order-1"), s.handlerRuns("order-2"), s.handlerRuns("order-3"), n)
	if n != 3 {
		fmt.Println("BAD: want 3 orders, one per key")
		ok = false
	}
	return ok
}

// drop removes the demo's tables.
func drop(db *sql.DB, tables ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, t := range tables {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t)
	}
}
