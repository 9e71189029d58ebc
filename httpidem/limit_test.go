package httpidem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

func tenantKey(r *http.Request) (string, error) {
	if t := r.Header.Get("X-Tenant"); t != "" {
		return t, nil
	}
	return "", errors.New("no X-Tenant")
}

// TestLimit: at most Limit requests of a tenant run at once; the others
// get 429 with Retry-After, or wait with WaitTimeout; tenants do not share
// a limit; a panicking handler gives its permit back; a request without a
// key is 401.
func TestLimit(t *testing.T) {
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	var running, most atomic.Int64
	gate := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if r.Header.Get("X-Panic") != "" {
			panic("boom")
		}
		if r.Header.Get("X-Block") != "" {
			<-gate
		}
		w.WriteHeader(http.StatusNoContent)
	})
	var mu sync.Mutex
	var outcomes []httpidem.Outcome
	cfg := httpidem.LimitConfig{Locks: locks, Limit: 2, Key: tenantKey, Name: "exports",
		OnDecision: func(_ context.Context, d httpidem.Decision) {
			mu.Lock()
			outcomes = append(outcomes, d.Outcome)
			mu.Unlock()
			if d.Kind != httpidem.KindLimit || d.Scope != "exports" {
				t.Errorf("decision %+v", d)
			}
		}}
	srv := httptest.NewServer(recoverer(httpidem.Limit(cfg)(h)))
	defer srv.Close()
	do := func(tenant string, headers ...string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		for _, k := range headers {
			req.Header.Set(k, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// Two block tenant A's limit; a third is turned away, B is not.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { do("A", "X-Block") })
	}
	for running.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	resp := do("A")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("third request of A: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := do("B"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("B while A is full: %d", resp.StatusCode)
	}
	close(gate)
	wg.Wait()
	if m := most.Load(); m != 3 {
		t.Errorf("at most %d ran at once, want 3 (A's two and B)", m)
	}
	// A panic gives the permit back: two more fit afterwards.
	if resp := do("A", "X-Panic"); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("panicking handler: %d", resp.StatusCode)
	}
	for i := range 3 {
		if resp := do("A"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("request %d after the panic: %d", i, resp.StatusCode)
		}
	}
	if resp := do(""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no tenant: %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	counts := map[httpidem.Outcome]int{}
	for _, o := range outcomes {
		counts[o]++
	}
	want := map[httpidem.Outcome]int{httpidem.OutcomeAcquired: 7, httpidem.OutcomeLimited: 1, httpidem.OutcomeUnauthenticated: 1}
	for o, n := range want {
		if counts[o] != n {
			t.Errorf("outcome %s: %d, want %d (all: %v)", o, counts[o], n, outcomes)
		}
	}
}

// TestLimitWaits: with WaitTimeout, a request over the limit waits for a
// permit given back, instead of a 429.
func TestLimitWaits(t *testing.T) {
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	var running, most atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	})
	mw := httpidem.Limit(httpidem.LimitConfig{Locks: locks, Limit: 3, Key: tenantKey, WaitTimeout: 10 * time.Second})(h)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 24 {
		wg.Go(func() {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Tenant", "t")
			w := httptest.NewRecorder()
			mw.ServeHTTP(w, r)
			if w.Code != http.StatusNoContent {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 || most.Load() > 3 {
		t.Fatalf("%d requests failed; at most %d at once (limit 3)", bad.Load(), most.Load())
	}
}

// TestLimitConfig: a configuration mistake fails at start-up.
func TestLimitConfig(t *testing.T) {
	locks := mustNew(core.NewMemory())
	defer locks.Close()
	for name, cfg := range map[string]httpidem.LimitConfig{
		"nil Locks": {Limit: 1, Key: tenantKey},
		"nil Key":   {Locks: locks, Limit: 1},
		"zero":      {Locks: locks, Key: tenantKey},
		"too big":   {Locks: locks, Key: tenantKey, Limit: core.MaxSemaphoreLimit + 1},
		"bad name":  {Locks: locks, Key: tenantKey, Limit: 1, Name: "a\nb"},
		"bad wait":  {Locks: locks, Key: tenantKey, Limit: 1, WaitTimeout: -1},
	} {
		if _, err := cfg.ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	defer func() {
		if p := recover(); p == nil {
			t.Error("Limit with a bad config did not panic")
		}
	}()
	httpidem.Limit(httpidem.LimitConfig{})
}

// recoverer answers 500 to a panicking handler, as a server's recovery
// middleware would.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
