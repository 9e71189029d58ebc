package httpidem_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/redis/go-redis/v9"
)

// mw builds the Idempotency middleware around h, failing on config errors.
func mw(t *testing.T, cfg httpidem.IdempotencyConfig, h http.Handler) http.Handler {
	t.Helper()
	if cfg.Principal == nil {
		cfg.Principal = tenant
	}
	m, err := cfg.ToMiddleware()
	if err != nil {
		t.Fatal(err)
	}
	return m(h)
}

func TestFirstThenReplay(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		var d decisions
		var c counter
		h := mw(t, httpidem.IdempotencyConfig{Store: store, Require: true, OnDecision: d.record}, &c)

		first := do(h, "POST", "/orders?x=1", `{"sku":42}`, withKey("k1"), withTenant("A"))
		if first.Code != http.StatusCreated || first.Header().Get(httpidem.HeaderReplayed) != "" {
			t.Fatalf("first: %d %v", first.Code, first.Header())
		}
		if first.Header().Get("Set-Cookie") == "" {
			t.Fatal("the first answer lost its own cookie")
		}
		for i := 0; i < 2; i++ {
			again := do(h, "POST", "/orders?x=1", `{"sku":42}`, withKey(`"k1"`), withTenant("A"))
			if again.Code != first.Code {
				t.Fatalf("replay status %d, want %d", again.Code, first.Code)
			}
			sameBytes(t, "replayed body", again.Body.Bytes(), first.Body.Bytes())
			hd := again.Header()
			if hd.Get(httpidem.HeaderReplayed) != "true" {
				t.Fatalf("replay lacks %s: %v", httpidem.HeaderReplayed, hd)
			}
			if hd.Get("Content-Type") != "application/json" || hd.Get("Location") != "/orders/42" {
				t.Fatalf("replay lost allow-listed headers: %v", hd)
			}
			if hd.Get("Set-Cookie") != "" || hd.Get("X-Internal") != "" {
				t.Fatalf("replay carries headers that must not be stored: %v", hd)
			}
			if hd.Get("Content-Length") != strconv.Itoa(first.Body.Len()) {
				t.Fatalf("Content-Length %q", hd.Get("Content-Length"))
			}
		}
		if n := c.n.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		want := []httpidem.Outcome{httpidem.OutcomeFirst, httpidem.OutcomeReplayed, httpidem.OutcomeReplayed}
		if got := d.outcomes(); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("decisions %v, want %v", got, want)
		}
	})
}

func TestFingerprintMismatchIs422(t *testing.T) {
	cases := []struct {
		name, method, target, body string
	}{
		{"other body", "POST", "/orders", `{"sku":43}`},
		{"other path", "POST", "/refunds", `{"sku":42}`},
		{"other query", "POST", "/orders?dry=1", `{"sku":42}`},
		{"other method", "PATCH", "/orders", `{"sku":42}`},
	}
	eachBackend(t, func(t *testing.T, store testStore) {
		var c counter
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, &c)
		if w := do(h, "POST", "/orders", `{"sku":42}`, withKey("k"), withTenant("A")); w.Code != http.StatusCreated {
			t.Fatalf("first: %d", w.Code)
		}
		for _, tc := range cases {
			w := do(h, tc.method, tc.target, tc.body, withKey("k"), withTenant("A"))
			problem(t, w, http.StatusUnprocessableEntity, httpidem.CodeKeyReused)
		}
		if n := c.n.Load(); n != 1 {
			t.Fatalf("handler ran %d times", n)
		}
	})
}

func TestMissingAndInvalidKeys(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	var c counter

	required := mw(t, httpidem.IdempotencyConfig{Store: store, Require: true}, &c)
	problem(t, do(required, "POST", "/o", "x", withTenant("A")), http.StatusBadRequest, httpidem.CodeKeyMissing)
	for _, bad := range []string{"", `""`, strings.Repeat("k", 256), "a,b", "a\x01b"} {
		problem(t, do(required, "POST", "/o", "x", withKey(bad), withTenant("A")), http.StatusBadRequest, httpidem.CodeInvalidKey)
	}
	w := do(required, "POST", "/o", "x", withHeader(httpidem.HeaderKey, "a"), withHeader(httpidem.HeaderKey, "b"), withTenant("A"))
	problem(t, w, http.StatusBadRequest, httpidem.CodeInvalidKey)
	// Safe methods are not covered: no key needed.
	if w := do(required, "GET", "/o", "", withTenant("A")); w.Code != http.StatusCreated {
		t.Fatalf("GET: %d", w.Code)
	}
	if n := c.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want only for GET", n)
	}

	optional := mw(t, httpidem.IdempotencyConfig{Store: store}, &c)
	for i := 0; i < 2; i++ {
		w := do(optional, "POST", "/o", "body", withTenant("A"))
		if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"echo":"body"`) {
			t.Fatalf("no key, not required: %d %s", w.Code, w.Body)
		}
	}
	if n := c.n.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}

func TestPrincipalScopesKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		var c counter
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, &c)
		a := do(h, "POST", "/orders", "same", withKey("shared-key"), withTenant("A"))
		b := do(h, "POST", "/orders", "same", withKey("shared-key"), withTenant("B"))
		if a.Code != http.StatusCreated || b.Code != http.StatusCreated || b.Header().Get(httpidem.HeaderReplayed) != "" {
			t.Fatalf("A %d, B %d %v", a.Code, b.Code, b.Header())
		}
		if n := c.n.Load(); n != 2 {
			t.Fatalf("handler ran %d times: tenant B got tenant A's response", n)
		}
		// Principals are not confused by separators.
		x := do(h, "POST", "/orders", "same", withKey("b:k"), withTenant("a"))
		y := do(h, "POST", "/orders", "same", withKey("k"), withTenant("a:b"))
		if x.Header().Get(httpidem.HeaderReplayed) != "" || y.Header().Get(httpidem.HeaderReplayed) != "" {
			t.Fatal("distinct (principal, key) pairs collided")
		}
		problem(t, do(h, "POST", "/orders", "same", withKey("k")), http.StatusUnauthorized, httpidem.CodeUnauthenticated)
		empty := mw(t, httpidem.IdempotencyConfig{Store: store, Principal: func(*http.Request) (string, error) { return "", nil }}, &c)
		problem(t, do(empty, "POST", "/orders", "same", withKey("k")), http.StatusUnauthorized, httpidem.CodeUnauthenticated)
	})
}

func TestDefaultPrincipalIsAuthorization(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	var c counter
	h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store})(&c)
	problem(t, do(h, "POST", "/o", "x", withKey("k")), http.StatusUnauthorized, httpidem.CodeUnauthenticated)
	do(h, "POST", "/o", "x", withKey("k"), withHeader("Authorization", "Bearer alice"))
	bob := do(h, "POST", "/o", "x", withKey("k"), withHeader("Authorization", "Bearer bob"))
	again := do(h, "POST", "/o", "x", withKey("k"), withHeader("Authorization", "Bearer alice"))
	if bob.Header().Get(httpidem.HeaderReplayed) != "" || again.Header().Get(httpidem.HeaderReplayed) != "true" {
		t.Fatalf("bob replayed=%q, alice again replayed=%q", bob.Header().Get(httpidem.HeaderReplayed), again.Header().Get(httpidem.HeaderReplayed))
	}
}

func TestFiftyConcurrentRequestsRunOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		const n = 50
		var runs counter
		release := make(chan struct{})
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release // hold the lease until every copy has been answered
			runs.ServeHTTP(w, r)
		}))
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		answered := make(chan int, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := do(h, "POST", "/pay", `{"amount":10}`, withKey("pay-1"), withTenant("A"))
				if w.Code == http.StatusConflict {
					if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 1 {
						t.Errorf("409 with Retry-After %q", w.Header().Get("Retry-After"))
					}
				}
				mu.Lock()
				codes[w.Code]++
				mu.Unlock()
				answered <- w.Code
			}()
		}
		for i := 0; i < n-1; i++ {
			<-answered
		}
		close(release)
		wg.Wait()
		if runs.n.Load() != 1 || codes[http.StatusCreated] != 1 || codes[http.StatusConflict] != n-1 {
			t.Fatalf("runs %d, answers %v; want 1 run, one 201 and %d 409", runs.n.Load(), codes, n-1)
		}
		if w := do(h, "POST", "/pay", `{"amount":10}`, withKey("pay-1"), withTenant("A")); w.Header().Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("after completion: %d %v", w.Code, w.Header())
		}
	})
}

func TestMismatchWinsOverInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		started, release := make(chan struct{}), make(chan struct{})
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			w.WriteHeader(http.StatusCreated)
		}))
		done := make(chan struct{})
		go func() {
			defer close(done)
			do(h, "POST", "/pay", `{"amount":10}`, withKey("k"), withTenant("A"))
		}()
		<-started
		problem(t, do(h, "POST", "/pay", `{"amount":99}`, withKey("k"), withTenant("A")), http.StatusUnprocessableEntity, httpidem.CodeKeyReused)
		w := do(h, "POST", "/pay", `{"amount":10}`, withKey("k"), withTenant("A"))
		problem(t, w, http.StatusConflict, httpidem.CodeInFlight)
		if w.Header().Get("Retry-After") == "" {
			t.Fatal("409 without Retry-After")
		}
		close(release)
		<-done
	})
}

func TestDecisionsOfRejections(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	var d decisions
	var c counter
	h := mw(t, httpidem.IdempotencyConfig{Store: store, Require: true, OnDecision: d.record}, &c)
	do(h, "POST", "/x", "b", withTenant("A"))
	do(h, "POST", "/x", "b", withKey(""), withTenant("A"))
	do(h, "POST", "/x", "b", withKey("k"))
	do(h, "POST", "/x", "b", withKey("k"), withTenant("A"))
	do(h, "POST", "/x", "c", withKey("k"), withTenant("A"))
	want := []struct {
		o   httpidem.Outcome
		err error
	}{
		{httpidem.OutcomeInvalid, httpidem.ErrKeyMissing},
		{httpidem.OutcomeInvalid, httpidem.ErrInvalidKey},
		{httpidem.OutcomeUnauthenticated, httpidem.ErrUnauthenticated},
		{httpidem.OutcomeFirst, nil},
		{httpidem.OutcomeMismatch, httpidem.ErrKeyReused},
	}
	if len(d.got) != len(want) {
		t.Fatalf("decisions %+v", d.got)
	}
	for i, w := range want {
		g := d.got[i]
		if g.Kind != httpidem.KindIdempotency || g.Outcome != w.o || (w.err != nil && !errors.Is(g.Err, w.err)) {
			t.Errorf("decision %d = %+v, want %v %v", i, g, w.o, w.err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	bad := []httpidem.IdempotencyConfig{
		{},
		{Store: store, StoreHeaders: []string{"set-cookie"}},
		{Store: store, StoreHeaders: []string{"Authorization"}},
		{Store: store, StoreHeaders: []string{"Transfer-Encoding"}},
		{Store: store, LeaseTTL: -1},
		{Store: store, MaxKeyLength: 301},
		{Store: store, WaitInFlight: -1},
	}
	for i, cfg := range bad {
		if _, err := cfg.ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("config %d: err %v, want ErrInvalidConfig", i, err)
		}
		// The constructor panics at start-up, never a 500 per request.
		mustPanic(t, httpidem.ErrInvalidConfig, func() { httpidem.Idempotency(cfg) })
	}
}

// TestStoreConstructorErrors: a store constructor that cannot work returns
// an error matching ErrInvalidConfig, and no store.
func TestStoreConstructorErrors(t *testing.T) {
	for name, f := range map[string]func() (any, error){
		"nil redis":       func() (any, error) { return httpidem.NewRedisStore(nil) },
		"typed nil redis": func() (any, error) { return httpidem.NewRedisStore((*redis.Client)(nil)) },
		"braced prefix":   func() (any, error) { return httpidem.NewMemoryStore(httpidem.WithKeyPrefix("a{b}")) },
		"nil clock":       func() (any, error) { return httpidem.NewMemoryStore(httpidem.WithClock(nil)) },
		"nil locks":       func() (any, error) { return httpidem.NewMemoryStore(httpidem.WithLocks(nil)) },
		"control prefix":  func() (any, error) { return httpidem.NewMemoryStore(httpidem.WithKeyPrefix("a\x00b")) },
	} {
		if _, err := f(); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// ctxKey marks the test's context.
type ctxKey struct{}

func TestRequestContextIsDerived(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	h := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(ctxKey{}) != "v" || r.Context().Err() != nil {
			t.Errorf("handler context lost the request's values or is done")
		}
	}))
	do(h, "POST", "/x", "b", withKey("k"), withTenant("A"), withContext(context.WithValue(context.Background(), ctxKey{}, "v")))
}

// TestTypedNilStore: a nil *MemoryStore or *RedisStore in a config is the
// same configuration error as a nil Store — never a nil-pointer panic in
// NewIdempotencyGuard, NewGate or the middleware constructors (which panic
// with the error, at start-up).
func TestTypedNilStore(t *testing.T) {
	_, wantGuard := httpidem.NewIdempotencyGuard(httpidem.IdempotencyConfig{})
	_, wantGate := httpidem.NewGate(httpidem.DailyConfig{Scope: "vote"})
	if !errors.Is(wantGuard, httpidem.ErrInvalidConfig) || !errors.Is(wantGate, httpidem.ErrInvalidConfig) {
		t.Fatalf("nil Store: %v, %v", wantGuard, wantGate)
	}
	for name, store := range map[string]testStore{
		"*MemoryStore": (*httpidem.MemoryStore)(nil),
		"*RedisStore":  (*httpidem.RedisStore)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := httpidem.NewIdempotencyGuard(httpidem.IdempotencyConfig{Store: store}); err == nil || err.Error() != wantGuard.Error() {
				t.Errorf("NewGuard: %v, want %v", err, wantGuard)
			}
			if _, err := httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "vote"}); err == nil || err.Error() != wantGate.Error() {
				t.Errorf("NewGate: %v, want %v", err, wantGate)
			}
			if e := mustPanic(t, httpidem.ErrInvalidConfig, func() { httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store}) }); e.Error() != wantGuard.Error() {
				t.Errorf("Idempotency panicked with %v, want %v", e, wantGuard)
			}
			if e := mustPanic(t, httpidem.ErrInvalidConfig, func() { httpidem.Daily(httpidem.DailyConfig{Store: store, Scope: "vote", Subject: user}) }); e.Error() != wantGate.Error() {
				t.Errorf("Daily panicked with %v, want %v", e, wantGate)
			}
		})
	}
	_, got := httpidem.NewRedisStore((*redis.Client)(nil))
	_, want := httpidem.NewRedisStore(nil)
	if got == nil || got.Error() != want.Error() {
		t.Errorf("NewRedisStore((*redis.Client)(nil)) = %v, want %v", got, want)
	}
}
