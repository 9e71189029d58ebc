package httpidem_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// obsKey marks the context an Observer returned.
type obsKey struct{}

// recObserver records observations: each DecisionStart marks its context
// with "kind/scope", and each end func records the decision, once.
type recObserver struct {
	t      *testing.T
	mu     sync.Mutex
	starts int
	ends   []httpidem.Decision
}

func (o *recObserver) DecisionStart(ctx context.Context, kind, scope string) (context.Context, func(httpidem.Decision)) {
	o.mu.Lock()
	o.starts++
	o.mu.Unlock()
	called := false
	return context.WithValue(ctx, obsKey{}, kind+"/"+scope), func(d httpidem.Decision) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if called {
			o.t.Errorf("end called twice: %v", d.Outcome)
		}
		called = true
		if d.Kind != kind || d.Scope != scope {
			o.t.Errorf("started %s/%s, ended %s/%s", kind, scope, d.Kind, d.Scope)
		}
		o.ends = append(o.ends, d)
	}
}

// state returns the number of starts and the outcomes of the ends.
func (o *recObserver) state() (int, []httpidem.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []httpidem.Outcome
	for _, d := range o.ends {
		out = append(out, d.Outcome)
	}
	return o.starts, out
}

// markStore fails the test if a store call's context is not the
// Observer's.
type markStore struct {
	testStore
	t     *testing.T
	want  string
	calls int
	mu    sync.Mutex
}

func (s *markStore) check(ctx context.Context, op string) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	if got := ctx.Value(obsKey{}); got != s.want {
		s.t.Errorf("%s ran with context mark %v, want %q (the Observer's context)", op, got, s.want)
	}
}

func (s *markStore) Begin(ctx context.Context, a httpidem.BeginArgs) (httpidem.Begun, error) {
	s.check(ctx, "Begin")
	b, err := s.testStore.Begin(ctx, a)
	if b.Lease != nil {
		b.Lease = markLease{b.Lease, s}
	}
	return b, err
}

func (s *markStore) Claim(ctx context.Context, a httpidem.ClaimArgs) (bool, error) {
	s.check(ctx, "Claim")
	return s.testStore.Claim(ctx, a)
}

func (s *markStore) Unclaim(ctx context.Context, a httpidem.ClaimArgs) error {
	s.check(ctx, "Unclaim")
	return s.testStore.Unclaim(ctx, a)
}

type markLease struct {
	httpidem.Lease
	s *markStore
}

func (l markLease) Complete(ctx context.Context, rec *httpidem.Record, ttl time.Duration) error {
	l.s.check(ctx, "Complete")
	return l.Lease.Complete(ctx, rec, ttl)
}

func (l markLease) Release(ctx context.Context) error {
	l.s.check(ctx, "Release")
	return l.Lease.Release(ctx)
}

// failStore's Begin and Claim fail.
type failStore struct{ testStore }

var errBroken = errors.New("broken")

func (failStore) Begin(context.Context, httpidem.BeginArgs) (httpidem.Begun, error) {
	return httpidem.Begun{}, errBroken
}

func (failStore) Claim(context.Context, httpidem.ClaimArgs) (bool, error) { return false, errBroken }

// TestObserverIdempotency: the Observer is told before the first store
// call, every store call (completion included) and the handler run with
// its context, its end is called once per observed request with the last
// decision, and OnDecision hears every decision as before.
func TestObserverIdempotency(t *testing.T) {
	mem := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { mem.Close() })
	store := &markStore{testStore: mem, t: t, want: "idempotency/orders"}
	obs := &recObserver{t: t}
	var d decisions
	h := mw(t, httpidem.IdempotencyConfig{Store: store, Observer: obs, Scope: "orders", OnDecision: d.record},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			want := any("idempotency/orders")
			if r.Method != http.MethodPost || r.Header.Get("Idempotency-Key") == "" {
				want = nil // passed through: not observed
			}
			if got := r.Context().Value(obsKey{}); got != want {
				t.Errorf("%s with key %q: handler context mark %v, want %v", r.Method, r.Header.Get("Idempotency-Key"), got, want)
			}
			if r.Header.Get("X-Panic") != "" {
				panic("boom")
			}
			if r.Header.Get("X-Fail") != "" {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
	do(h, "POST", "/o", "a", withKey("k1"), withTenant("A"))                            // first
	do(h, "POST", "/o", "a", withKey("k1"), withTenant("A"))                            // replayed
	do(h, "POST", "/o", "b", withKey("k1"), withTenant("A"))                            // mismatch
	do(h, "POST", "/o", "a", withTenant("A"))                                           // no key: not observed
	do(h, "GET", "/o", "", withKey("k1"), withTenant("A"))                              // not applicable: not observed
	do(h, "POST", "/o", "a", withKey("k2"), withTenant("A"), withHeader("X-Fail", "1")) // not stored
	do(h, "POST", "/o", "a", withKey(`"a", "b"`), withTenant("A"))                      // invalid
	do(h, "POST", "/o", "a", withKey("k3"))                                             // no principal
	func() {
		defer func() { recover() }()
		do(h, "POST", "/o", "a", withKey("k4"), withTenant("A"), withHeader("X-Panic", "1"))
	}()

	starts, ends := obs.state()
	want := []httpidem.Outcome{"first", "replayed", "mismatch", "not_stored", "invalid", "unauthenticated", "not_stored"}
	if starts != len(want) || !slices.Equal(ends, want) {
		t.Errorf("observer: %d starts, ends %v; want %d, %v", starts, ends, len(want), want)
	}
	wantOn := []httpidem.Outcome{"first", "replayed", "mismatch", "first", "not_stored", "invalid", "unauthenticated", "first", "not_stored"}
	if got := d.outcomes(); !slices.Equal(got, wantOn) {
		t.Errorf("OnDecision: %v, want %v", got, wantOn)
	}
	for _, x := range d.got {
		if x.Scope != "orders" {
			t.Errorf("OnDecision scope %q", x.Scope)
		}
	}
	if store.calls < 8 { // 6 Begins, a Complete and 2 Releases
		t.Errorf("only %d store calls checked", store.calls)
	}
}

// TestObserverIdempotencyFailures: a store error ends the observation at
// once (with FailOpen, before the unprotected handler runs, which keeps
// the request's own context), and a lost lease ends it with lease_lost.
func TestObserverIdempotencyFailures(t *testing.T) {
	mem := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { mem.Close() })
	for _, failOpen := range []bool{false, true} {
		obs := &recObserver{t: t}
		ran := false
		h := mw(t, httpidem.IdempotencyConfig{Store: failStore{mem}, Observer: obs, FailOpen: failOpen},
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran = true
				if _, ends := obs.state(); len(ends) != 1 || r.Context().Value(obsKey{}) != nil {
					t.Errorf("fail-open handler runs inside the observation")
				}
			}))
		w := do(h, "POST", "/o", "a", withKey("k"), withTenant("A"))
		starts, ends := obs.state()
		if starts != 1 || !slices.Equal(ends, []httpidem.Outcome{"store_error"}) || ran != failOpen {
			t.Errorf("FailOpen %v: %d %d starts, ends %v, ran %v", failOpen, w.Code, starts, ends, ran)
		}
		if !errors.Is(obs.ends[0].Err, errBroken) || !errors.Is(obs.ends[0].Err, httpidem.ErrUnavailable) {
			t.Errorf("store error %v", obs.ends[0].Err)
		}
	}

	mr, rdb := startMiniredis(t, false)
	rs := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
	t.Cleanup(func() { rs.Close() })
	obs := &recObserver{t: t}
	started := make(chan struct{})
	h := mw(t, httpidem.IdempotencyConfig{Store: rs, Observer: obs, LeaseTTL: 300 * time.Millisecond},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done() // the lease is lost
		}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(h, "POST", "/o", "a", withKey("k"), withTenant("A"))
	}()
	<-started
	for _, k := range leaseKeys(mr) {
		mr.Del(k)
	}
	<-done
	if starts, ends := obs.state(); starts != 1 || !slices.Equal(ends, []httpidem.Outcome{"lease_lost"}) {
		t.Errorf("lost lease: %d starts, ends %v", starts, ends)
	}
}

// TestObserverDaily: the gate's observation covers the claim, the handler
// and a release; Count mode's covers only the claim after a 2xx; a store
// error with FailOpen ends it before the handler.
func TestObserverDaily(t *testing.T) {
	mem := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { mem.Close() })

	store := &markStore{testStore: mem, t: t, want: "daily/vote"}
	obs := &recObserver{t: t}
	var d decisions
	h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "vote", Observer: obs, OnDecision: d.record},
		func(w http.ResponseWriter, r *http.Request) {
			if got := r.Context().Value(obsKey{}); got != "daily/vote" {
				t.Errorf("handler context mark %v", got)
			}
			if r.Header.Get("X-Fail") != "" {
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
	do(h, "POST", "/vote/9", "", withUser("u1"))                            // first
	do(h, "POST", "/vote/9", "", withUser("u1"))                            // duplicate
	do(h, "POST", "/vote/8", "", withUser("u1"), withHeader("X-Fail", "1")) // released
	do(h, "POST", "/vote/9", "")                                            // invalid
	starts, ends := obs.state()
	if want := []httpidem.Outcome{"first", "duplicate", "released", "unauthenticated"}; starts != 4 || !slices.Equal(ends, want) {
		t.Errorf("gate: %d starts, ends %v, want %v", starts, ends, want)
	}
	if got, want := d.outcomes(), []httpidem.Outcome{"first", "duplicate", "first", "released", "unauthenticated"}; !slices.Equal(got, want) {
		t.Errorf("OnDecision %v, want %v", got, want)
	}

	store = &markStore{testStore: mem, t: t, want: "daily/read"}
	obs = &recObserver{t: t}
	h = voteMux(t, httpidem.DailyConfig{Store: store, Scope: "read", Mode: httpidem.ModeCount, Observer: obs},
		func(w http.ResponseWriter, r *http.Request) {
			if r.Context().Value(obsKey{}) != nil {
				t.Errorf("count-mode handler runs inside the observation")
			}
			if r.Header.Get("X-Fail") != "" {
				w.WriteHeader(http.StatusNotFound)
			}
		})
	do(h, "POST", "/vote/7", "", withUser("u1"))
	do(h, "POST", "/vote/7", "", withUser("u1"))
	do(h, "POST", "/vote/7", "", withUser("u2"), withHeader("X-Fail", "1")) // not counted, not observed
	if starts, ends := obs.state(); starts != 2 || !slices.Equal(ends, []httpidem.Outcome{"first", "duplicate"}) {
		t.Errorf("count: %d starts, ends %v", starts, ends)
	}

	obs = &recObserver{t: t}
	ran := false
	h = voteMux(t, httpidem.DailyConfig{Store: failStore{mem}, Scope: "vote", Observer: obs, FailOpen: true},
		func(w http.ResponseWriter, r *http.Request) {
			ran = true
			if _, ends := obs.state(); len(ends) != 1 {
				t.Errorf("fail-open handler runs inside the observation")
			}
		})
	do(h, "POST", "/vote/9", "", withUser("u1"))
	if starts, ends := obs.state(); starts != 1 || !slices.Equal(ends, []httpidem.Outcome{"store_error"}) || !ran {
		t.Errorf("fail open: %d starts, ends %v, ran %v", starts, ends, ran)
	}
}

// TestObserverNilContext: an Observer that returns a nil context and a nil
// func leaves the request's context in place.
func TestObserverNilContext(t *testing.T) {
	mem := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { mem.Close() })
	h := mw(t, httpidem.IdempotencyConfig{Store: mem, Observer: nilObserver{}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	if w := do(h, "POST", "/o", "a", withKey("k"), withTenant("A")); w.Code != http.StatusCreated {
		t.Fatalf("status %d", w.Code)
	}
}

type nilObserver struct{}

func (nilObserver) DecisionStart(context.Context, string, string) (context.Context, func(httpidem.Decision)) {
	return nil, nil
}

// TestScopeValidation: IdempotencyConfig.Scope follows the module's one
// name rule, as the Daily scope does.
func TestScopeValidation(t *testing.T) {
	mem := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { mem.Close() })
	for _, s := range []string{"bad\nscope", "a\xffb", string(make([]byte, 65))} {
		if _, err := (httpidem.IdempotencyConfig{Store: mem, Scope: s}).ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("Scope %q: %v", s, err)
		}
	}
	for _, s := range []string{"orders.v2", "orders v2", "a:b", "ü"} {
		if _, err := (httpidem.IdempotencyConfig{Store: mem, Scope: s}).ToMiddleware(); err != nil {
			t.Errorf("Scope %q: %v", s, err)
		}
	}
}
