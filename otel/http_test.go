package otel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the HTTP decision contract.
const (
	scopeKey    = attribute.Key("latchkey.http.scope")
	outcomeKey  = attribute.Key("latchkey.outcome")
	errTypeKey  = attribute.Key("error.type")
	metricIdem  = "latchkey.idempotency.requests"
	metricDaily = "latchkey.daily.claims"
)

// serveIn serves r through h inside a "request" span of kind Server, as
// otelhttp would start it, and returns that span's context.
func serveIn(tel *telemetry, h http.Handler, r *http.Request) (trace.SpanContext, *httptest.ResponseRecorder) {
	ctx, span := tel.tp.Tracer("test").Start(r.Context(), "request", trace.WithSpanKind(trace.SpanKindServer))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(ctx))
	span.End()
	return span.SpanContext(), w
}

// childOf returns the one ended span named name whose parent is parent.
func (x *telemetry) childOf(t *testing.T, parent trace.SpanContext, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range x.sr.Ended() {
		if s.Name() == name && s.Parent().SpanID() == parent.SpanID() && s.SpanContext().TraceID() == parent.TraceID() {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %q under %v, want 1; have %s", len(found), name, parent.SpanID(), x.names())
	}
	return found[0]
}

// step is one request of a decision table and what it must produce.
type step struct {
	name    string
	r       *http.Request
	status  int    // HTTP status answered
	outcome string // the span's and the metric's latchkey.outcome
	errType string // error.type; "" for an outcome that is not an error
}

// checkDecision checks the decision span under req and its measurement:
// kind, parent, status, outcome, scope, error.type present only on failure
// and equal on the span and the metric's series.
func checkDecision(t *testing.T, tel *telemetry, req trace.SpanContext, spanName, metric, scope string, st step) {
	t.Helper()
	s := tel.childOf(t, req, spanName)
	status := codes.Unset
	want := []attribute.KeyValue{outcomeKey.String(st.outcome), scopeKey.String(scope)}
	if st.errType != "" {
		status = codes.Error
		want = append(want, errTypeKey.String(st.errType))
	}
	checkSpan(t, s, req, status, want...)
	if metric == "" {
		return
	}
	var series []point
	for _, p := range points(tel.collect(t)[metric]) {
		if hasAll(p.attrs, []attribute.KeyValue{outcomeKey.String(st.outcome), scopeKey.String(scope)}) {
			series = append(series, p)
		}
	}
	if len(series) != 1 {
		t.Fatalf("%s: %d series of outcome %s, want 1", metric, len(series), st.outcome)
	}
	if et, _ := series[0].attrs.Value(errTypeKey); et.AsString() != st.errType {
		t.Errorf("%s %s: metric error.type %q, span's %q", metric, st.outcome, et.AsString(), st.errType)
	}
}

// orders is the handler behind the idempotency middleware: it answers
// X-Status (default 201); with X-Block it waits for unblock; with X-Lose
// it waits for its context to end (the lease is lost).
type orders struct {
	entered chan struct{}
	unblock chan struct{}
}

func newOrders() *orders {
	return &orders{entered: make(chan struct{}, 1), unblock: make(chan struct{})}
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get("X-Block") != "":
		o.entered <- struct{}{}
		<-o.unblock
	case r.Header.Get("X-Lose") != "":
		o.entered <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
	status := http.StatusCreated
	if s := r.Header.Get("X-Status"); s != "" {
		status, _ = strconv.Atoi(s)
	}
	w.WriteHeader(status)
}

func post(target, key, body string, headers ...string) *http.Request {
	r := httptest.NewRequest("POST", target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	r.Header.Set("X-User", "ann")
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

func userOf(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, nil
	}
	return "", errors.New("anonymous")
}

// deadStore is a RedisStore on a Redis that is gone.
func deadStore(t *testing.T) *httpidem.RedisStore {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	mr.Close()
	s := must(httpidem.NewRedisStore(rdb))
	t.Cleanup(func() { s.Close(); rdb.Close() })
	return s
}

// TestIdempotencySpans: each outcome of the Idempotency middleware is a
// latchkey.idempotency span under the request's span and a count in
// latchkey.idempotency.requests, with error status and error.type only
// for a store error and a lost lease.
func TestIdempotencySpans(t *testing.T) {
	tel := newTelemetry(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	store := must(httpidem.NewRedisStore(rdb))
	t.Cleanup(func() { store.Close(); rdb.Close() })
	o := newOrders()
	cfg := httpidem.IdempotencyConfig{Store: store, Principal: userOf, Require: true, Scope: "orders",
		LeaseTTL: 300 * time.Millisecond, Observer: tel.inst}
	h := httpidem.Idempotency(cfg)(o)
	cfg.Store = deadStore(t)
	dead := httpidem.Idempotency(cfg)(o)

	// served is a request served, to be checked on the test's goroutine.
	type served struct {
		req trace.SpanContext
		w   *httptest.ResponseRecorder
	}
	verify := func(st step, x served) {
		t.Helper()
		if x.w.Code != st.status {
			t.Fatalf("%s: status %d, want %d", st.name, x.w.Code, st.status)
		}
		checkDecision(t, tel, x.req, "latchkey.idempotency", metricIdem, "orders", st)
	}
	check := func(st step, h http.Handler) {
		t.Helper()
		req, w := serveIn(tel, h, st.r)
		verify(st, served{req, w})
	}
	// background serves st on another goroutine.
	background := func(st step) <-chan served {
		ch := make(chan served, 1)
		go func() {
			req, w := serveIn(tel, h, st.r)
			ch <- served{req, w}
		}()
		return ch
	}
	for _, st := range []step{
		{"first", post("/orders", "k1", "a"), 201, "first", ""},
		{"replay", post("/orders", "k1", "a"), 201, "replayed", ""},
		{"other body", post("/orders", "k1", "b"), 422, "mismatch", ""},
		{"no key", post("/orders", "", "a"), 400, "invalid", ""},
		{"5xx", post("/orders", "k2", "a", "X-Status", "503"), 503, "not_stored", ""},
	} {
		check(st, h)
	}
	check(step{"store down", post("/orders", "k1", "a"), 503, "store_error", "backend"}, dead)

	// A copy while the first runs: in_flight; the first ends as first.
	blocked := step{"blocked first", post("/orders", "k3", "a", "X-Block", "1"), 201, "first", ""}
	first := background(blocked)
	<-o.entered
	check(step{"copy in flight", post("/orders", "k3", "a"), 409, "in_flight", ""}, h)
	close(o.unblock)
	verify(blocked, <-first)

	// The lease vanishes while the handler runs: lease_lost, an error.
	losing := step{"lost lease", post("/orders", "k4", "a", "X-Lose", "1"), 201, "lease_lost", "lost"}
	lost := background(losing)
	<-o.entered
	for _, k := range mr.Keys() {
		if strings.Contains(k, "{idem:") && strings.HasSuffix(k, "}") {
			mr.Del(k)
		}
	}
	verify(losing, <-lost)

	for outcome, n := range map[string]float64{"first": 2, "replayed": 1, "mismatch": 1, "invalid": 1,
		"not_stored": 1, "store_error": 1, "in_flight": 1, "lease_lost": 1} {
		if got := tel.value(t, metricIdem, outcomeKey.String(outcome)); got != n {
			t.Errorf("%s counted %v times, want %v", outcome, got, n)
		}
	}
}

// failUnclaim is a store whose Unclaim fails.
type failUnclaim struct{ httpidem.ClaimStore }

func (failUnclaim) Unclaim(context.Context, httpidem.ClaimArgs) error {
	return errors.New("unclaim: connection reset")
}

// TestDailySpans: each outcome of the Daily middleware is a latchkey.daily
// span under the request's span and a count in latchkey.daily.claims by
// scope; a duplicate is not an error, a store error and a claim that could
// not be given back are.
func TestDailySpans(t *testing.T) {
	tel := newTelemetry(t)
	mem := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { mem.Close() })
	mux := http.NewServeMux()
	route := func(pattern string, cfg httpidem.DailyConfig) {
		cfg.Subject, cfg.Observer = userOf, tel.inst
		cfg.Object = func(r *http.Request) (string, error) { return r.PathValue("item"), nil }
		mux.Handle(pattern, httpidem.Daily(cfg)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s := r.Header.Get("X-Status"); s != "" {
				code, _ := strconv.Atoi(s)
				w.WriteHeader(code)
			}
		})))
	}
	route("POST /vote/{item}", httpidem.DailyConfig{Store: mem, Scope: "vote"})
	route("POST /read/{item}", httpidem.DailyConfig{Store: mem, Scope: "read", Mode: httpidem.ModeCount})
	route("POST /down/{item}", httpidem.DailyConfig{Store: deadStore(t), Scope: "down"})
	route("POST /stuck/{item}", httpidem.DailyConfig{Store: failUnclaim{mem}, Scope: "stuck"})

	anon := post("/vote/9", "", "")
	anon.Header.Del("X-User")
	for _, tc := range []struct {
		scope string
		step
	}{
		{"vote", step{"first vote", post("/vote/9", "", ""), 200, "first", ""}},
		{"vote", step{"second vote", post("/vote/9", "", ""), 409, "duplicate", ""}},
		{"vote", step{"failed vote", post("/vote/8", "", "", "X-Status", "500"), 500, "released", ""}},
		{"vote", step{"anonymous", anon, 401, "unauthenticated", ""}},
		{"read", step{"first read", post("/read/7", "", ""), 200, "first", ""}},
		{"read", step{"second read", post("/read/7", "", ""), 200, "duplicate", ""}},
		{"down", step{"store down", post("/down/1", "", ""), 503, "store_error", "backend"}},
		{"stuck", step{"release fails", post("/stuck/1", "", "", "X-Status", "502"), 502, "released", "backend"}},
	} {
		req, w := serveIn(tel, mux, tc.r)
		if w.Code != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.name, w.Code, tc.status)
		}
		checkDecision(t, tel, req, "latchkey.daily", metricDaily, tc.scope, tc.step)
	}
	// A count-mode read that failed is not claimed: no span, no count.
	req, _ := serveIn(tel, mux, post("/read/7", "", "", "X-Status", "404"))
	for _, s := range tel.sr.Ended() {
		if s.Parent().SpanID() == req.SpanID() {
			t.Errorf("a failed count-mode read made span %s", s.Name())
		}
	}
	if got := tel.value(t, metricDaily, scopeKey.String("read")); got != 2 {
		t.Errorf("read claims counted %v, want 2", got)
	}
}

// TestDecisionStatusRules: which decisions are errors, with which
// error.type, whatever middleware reports them.
func TestDecisionStatusRules(t *testing.T) {
	tel := newTelemetry(t)
	lost := errors.New("core: lease lost")
	tests := []struct {
		d       httpidem.Decision
		errType string
	}{
		{httpidem.Decision{Outcome: httpidem.OutcomeInFlight, Status: 409, Err: httpidem.ErrInFlight}, ""},
		{httpidem.Decision{Outcome: httpidem.OutcomeInvalid, Status: 400, Err: httpidem.ErrKeyMissing}, ""},
		{httpidem.Decision{Outcome: httpidem.OutcomeNotStored, Err: errors.New("status 503 not stored by policy")}, ""},
		{httpidem.Decision{Outcome: httpidem.OutcomeNotStored, Err: errors.Join(errors.New("not storable"), httpidem.ErrUnavailable)}, "backend"},
		{httpidem.Decision{Outcome: httpidem.OutcomeReleased}, ""},
		{httpidem.Decision{Outcome: httpidem.OutcomeStoreError, Err: errors.Join(httpidem.ErrUnavailable, context.DeadlineExceeded)}, "timeout"},
		{httpidem.Decision{Outcome: httpidem.OutcomeStoreError, Status: 503, Err: httpidem.ErrInvalidArgument}, "invalid_argument"},
		{httpidem.Decision{Outcome: httpidem.OutcomeLost, Err: errors.Join(httpidem.ErrLost, lost)}, "lost"},
		{httpidem.Decision{Kind: "paramlock", Outcome: "locked", Status: 409}, ""},
		{httpidem.Decision{Kind: "paramlock", Outcome: "invalid", Status: 500, Err: errors.New("route has no parameter")}, "misconfigured"},
	}
	for _, tt := range tests {
		_, end := tel.inst.DecisionStart(context.Background(), "idempotency", "")
		end(tt.d)
		spans := tel.sr.Ended()
		s := spans[len(spans)-1]
		a := attrs(s)
		if a[errTypeKey].AsString() != tt.errType || (s.Status().Code == codes.Error) != (tt.errType != "") {
			t.Errorf("%s %v: error.type %q status %v, want %q", tt.d.Outcome, tt.d.Err, a[errTypeKey].AsString(), s.Status().Code, tt.errType)
		}
		if _, ok := a[scopeKey]; ok {
			t.Errorf("empty scope recorded: %v", s.Attributes())
		}
	}
}

// must returns v, or panics with err: for store constructors in tests.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
