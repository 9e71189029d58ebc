// Command vote shows httpidem on a small HTTP service: one vote per user
// per item per day, one check-in a day, unique daily readers, and an
// Idempotency-Key order endpoint — then a scripted client exercises each
// behaviour (first, duplicate, replay, 409 in flight, 422 reuse).
//
// With -trace, the middlewares and the store's leases are instrumented by
// package otel: each request is a server span with the middleware's
// decision inside (latchkey.idempotency, latchkey.daily, and the order
// lease's latchkey.acquire and latchkey.release under its decision),
// printed as a JSON line by OpenTelemetry's stdout exporter as it ends,
// and the metrics (latchkey.idempotency.requests, latchkey.daily.claims,
// the lock metrics) are summed up at the end.
//
//	cd examples && go run ./vote                      # embedded miniredis
//	cd examples && go run ./vote -trace               # ... printing spans and metrics
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./vote
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // Europe/Berlin on machines without a zone database

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/examples/internal/demo"
	"github.com/latchkey/latchkey/httpidem"
	"go.opentelemetry.io/otel/trace"
)

func main() {
	env := demo.Start("examples/vote")
	defer env.Close()
	tel, rdb := env.Tel, env.Redis

	// A fresh prefix per run, so a real Redis shows the same story twice;
	// its keys are deleted at the end.
	prefix := fmt.Sprintf("demo:vote:%d", time.Now().UnixNano())
	defer deleteKeys(rdb, prefix)
	storeOpts := []httpidem.StoreOption{httpidem.WithKeyPrefix(prefix)}
	var obs httpidem.Observer // stays a nil interface without -trace
	if tel.Inst != nil {
		// One Instrumentation for the middlewares and for the store's
		// leases, which then nest under the decisions that take them.
		obs = tel.Inst
		locks, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(tel.Inst))
		if err != nil {
			log.Fatal(err)
		}
		defer locks.Close()
		storeOpts = append(storeOpts, httpidem.WithLocks(locks))
	}
	store, err := httpidem.NewRedisStore(rdb, storeOpts...)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	srv, err := newServer(store, obs)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: serverSpans(tel.Tracer, srv.mux), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()

	c := &client{base: "http://" + ln.Addr().String()}
	ok := c.script(srv)
	srv.printDecisions()
	if !ok {
		os.Exit(1)
	}
}

// serverSpans starts a server span per request around h, named by the
// route pattern the mux matched — in short, what otelhttp.NewHandler does.
// Without -trace the tracer is a no-op.
func serverSpans(tracer trace.Tracer, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), r.Method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		r = r.WithContext(ctx)
		h.ServeHTTP(w, r)
		if r.Pattern != "" {
			span.SetName(r.Pattern)
		}
	})
}

// server is the demo service.
type server struct {
	mux   *http.ServeMux
	store *httpidem.RedisStore
	votes *httpidem.Gate
	reads *httpidem.Gate

	mu        sync.Mutex
	orders    int
	slowStart chan struct{} // closed when a slow order starts (for the script)
	decided   map[string]int
}

// user plays the part of an authentication middleware: the caller's ID.
func user(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, nil
	}
	return "", fmt.Errorf("not logged in")
}

// newServer builds the service; obs, if not nil, observes every middleware.
func newServer(store *httpidem.RedisStore, obs httpidem.Observer) (*server, error) {
	s := &server{mux: http.NewServeMux(), store: store, slowStart: make(chan struct{}), decided: map[string]int{}}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		return nil, err
	}
	item := func(r *http.Request) (string, error) { return r.PathValue("item"), nil }

	// One vote per user per item per Berlin day, counted.
	voteCfg := httpidem.DailyConfig{Store: store, Scope: "vote", Location: berlin, Subject: user, Object: item,
		Counted: true, OnDecision: s.decide, Observer: obs}
	vote, err := voteCfg.ToMiddleware()
	if err != nil {
		return nil, err
	}
	if s.votes, err = httpidem.NewGate(voteCfg); err != nil {
		return nil, err
	}
	s.mux.Handle("POST /vote/{item}", vote(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "vote for %s counted", r.PathValue("item"))
	})))
	s.mux.HandleFunc("GET /vote/{item}", func(w http.ResponseWriter, r *http.Request) {
		n, err := s.votes.Count(r.Context(), r.PathValue("item"), s.votes.Today())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "%d votes today", n)
	})

	// One check-in a day; a second one is a friendly 200.
	checkin, err := httpidem.DailyConfig{Store: store, Scope: "checkin", Location: berlin, Subject: user, OnDecision: s.decide, Observer: obs,
		DuplicateHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t, _ := httpidem.TicketFromContext(r.Context())
			fmt.Fprintf(w, "already checked in on %s; next check-in in %s", t.Day, t.RetryAfter.Round(time.Minute))
		}),
	}.ToMiddleware()
	if err != nil {
		return nil, err
	}
	s.mux.Handle("POST /checkin", checkin(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "checked in, +10 points")
	})))

	// Unique daily readers: never blocks, counts each reader once a day.
	readCfg := httpidem.DailyConfig{Store: store, Scope: "read", Location: berlin, Subject: user, Object: item,
		Mode: httpidem.ModeCount, OnDecision: s.decide, Observer: obs}
	read, err := readCfg.ToMiddleware()
	if err != nil {
		return nil, err
	}
	if s.reads, err = httpidem.NewGate(readCfg); err != nil {
		return nil, err
	}
	s.mux.Handle("GET /articles/{item}", read(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "article %s", r.PathValue("item"))
	})))
	s.mux.HandleFunc("GET /articles/{item}/readers", func(w http.ResponseWriter, r *http.Request) {
		n, err := s.reads.Count(r.Context(), r.PathValue("item"), s.reads.Today())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "%d unique readers today", n)
	})

	// Orders need an Idempotency-Key, scoped to the user.
	orders, err := httpidem.IdempotencyConfig{Store: store, Require: true, Principal: user, Scope: "orders",
		OnDecision: s.decide, Observer: obs}.ToMiddleware()
	if err != nil {
		return nil, err
	}
	s.mux.Handle("POST /orders", orders(http.HandlerFunc(s.createOrder)))
	return s, nil
}

func (s *server) createOrder(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Slow") != "" { // a slow payment provider
		close(s.slowStart)
		time.Sleep(300 * time.Millisecond)
	}
	s.mu.Lock()
	s.orders++
	n := s.orders
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d}`, n)
}

// decide is the OnDecision seam: a real service would count these in
// metrics or put them on its spans.
func (s *server) decide(_ context.Context, d httpidem.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := d.Kind
	if d.Scope != "" {
		k += "/" + d.Scope
	}
	s.decided[k+" "+string(d.Outcome)]++
}

func (s *server) printDecisions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for k, n := range s.decided {
		lines = append(lines, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(lines)
	fmt.Println("\ndecisions reported to OnDecision:")
	for _, l := range lines {
		fmt.Println("  " + l)
	}
}

// client is the scripted client.
type client struct {
	base   string
	failed bool
}

type call struct {
	method, path, user, key, body string
	slow                          bool
}

func (c *client) do(x call) (int, http.Header, string) {
	r, err := http.NewRequest(x.method, c.base+x.path, strings.NewReader(x.body))
	if err != nil {
		log.Fatal(err)
	}
	if x.user != "" {
		r.Header.Set("X-User", x.user)
	}
	if x.key != "" {
		r.Header.Set("Idempotency-Key", x.key)
	}
	if x.slow {
		r.Header.Set("X-Slow", "1")
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// show sends x, prints the answer and checks the status.
func (c *client) show(what string, want int, x call) (http.Header, string) {
	code, h, body := c.do(x)
	extra := ""
	if v := h.Get("Idempotent-Replayed"); v != "" {
		extra += " Idempotent-Replayed: " + v
	}
	if v := h.Get("Retry-After"); v != "" {
		extra += " Retry-After: " + v
	}
	mark := ""
	if code != want {
		mark = fmt.Sprintf("   <-- UNEXPECTED, wanted %d", want)
		c.failed = true
	}
	fmt.Printf("  %-44s %d%s  %s%s\n", what, code, extra, summarize(h, body), mark)
	return h, body
}

// summarize prints a problem's code, or the body.
func summarize(h http.Header, body string) string {
	if h.Get("Content-Type") == httpidem.ProblemContentType {
		if i := strings.Index(body, `"code":"`); i >= 0 {
			code := body[i+8:]
			return "problem " + code[:strings.IndexByte(code, '"')]
		}
	}
	return body
}

func (c *client) script(s *server) bool {
	fmt.Println("\nvotes (one per user per item per Berlin day):")
	c.show("ann votes for item 9", 200, call{method: "POST", path: "/vote/9", user: "ann"})
	c.show("ann votes for item 9 again", 409, call{method: "POST", path: "/vote/9", user: "ann"})
	c.show("bob votes for item 9", 200, call{method: "POST", path: "/vote/9", user: "bob"})
	c.show("ann votes for item 10", 200, call{method: "POST", path: "/vote/10", user: "ann"})
	c.show("anonymous vote", 401, call{method: "POST", path: "/vote/9"})
	c.show("tally of item 9", 200, call{method: "GET", path: "/vote/9"})

	fmt.Println("\ncheck-in (once a day, a duplicate is a friendly 200):")
	c.show("ann checks in", 200, call{method: "POST", path: "/checkin", user: "ann"})
	c.show("ann checks in again", 200, call{method: "POST", path: "/checkin", user: "ann"})

	fmt.Println("\nreads (never blocked, each reader counted once a day):")
	for _, u := range []string{"ann", "ann", "bob", "ann"} {
		c.show(u+" reads article 7", 200, call{method: "GET", path: "/articles/7", user: u})
	}
	c.show("readers of article 7", 200, call{method: "GET", path: "/articles/7/readers"})

	fmt.Println("\norders (Idempotency-Key, scoped per user):")
	c.show("ann orders, key k-1", 201, call{method: "POST", path: "/orders", user: "ann", key: "k-1", body: `{"sku":42}`})
	c.show("ann retries k-1 (lost the answer)", 201, call{method: "POST", path: "/orders", user: "ann", key: "k-1", body: `{"sku":42}`})
	c.show("ann reuses k-1 for another order", 422, call{method: "POST", path: "/orders", user: "ann", key: "k-1", body: `{"sku":7}`})
	c.show("bob uses the same key k-1", 201, call{method: "POST", path: "/orders", user: "bob", key: "k-1", body: `{"sku":42}`})
	c.show("ann orders without a key", 400, call{method: "POST", path: "/orders", user: "ann", body: `{"sku":42}`})

	done := make(chan struct{})
	go func() {
		defer close(done)
		c.show("ann orders slowly, key k-2", 201, call{method: "POST", path: "/orders", user: "ann", key: "k-2", body: `{"sku":9}`, slow: true})
	}()
	<-s.slowStart
	c.show("ann double-taps k-2 while it runs", 409, call{method: "POST", path: "/orders", user: "ann", key: "k-2", body: `{"sku":9}`})
	<-done
	c.show("ann retries k-2 after it finished", 201, call{method: "POST", path: "/orders", user: "ann", key: "k-2", body: `{"sku":9}`})
	s.mu.Lock()
	fmt.Printf("  orders created: %d (of 8 order requests)\n", s.orders)
	s.mu.Unlock()
	return !c.failed
}
