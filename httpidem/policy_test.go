package httpidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

func TestStorePolicy(t *testing.T) {
	statuses := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests}
	eachBackend(t, func(t *testing.T, store testStore) {
		for _, status := range statuses {
			var runs int
			h := func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(status) }
			def := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(h))
			key := "policy-" + strconv.Itoa(status)
			do(def, "POST", "/x", "b", withKey(key), withTenant("A"))
			do(def, "POST", "/x", "b", withKey(key), withTenant("A"))
			if runs != 2 {
				t.Fatalf("status %d: ran %d times, want 2 (not stored by default)", status, runs)
			}
			all := mw(t, httpidem.IdempotencyConfig{Store: store, StoreStatus: func(int) bool { return true }}, http.HandlerFunc(h))
			do(all, "POST", "/x", "b", withKey(key+"-all"), withTenant("A"))
			w := do(all, "POST", "/x", "b", withKey(key+"-all"), withTenant("A"))
			if runs != 3 || w.Code != status || w.Header().Get(httpidem.HeaderReplayed) != "true" {
				t.Fatalf("StoreStatus all, status %d: runs %d, replay %d %v", status, runs, w.Code, w.Header())
			}
		}
		// 4xx are stored by default: the draft replays errors too.
		runs := 0
		bad := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			http.Error(w, "no such sku", http.StatusNotFound)
		}))
		do(bad, "POST", "/x", "b", withKey("k404"), withTenant("A"))
		if w := do(bad, "POST", "/x", "b", withKey("k404"), withTenant("A")); runs != 1 || w.Code != http.StatusNotFound {
			t.Fatalf("404: runs %d, replay %d", runs, w.Code)
		}
	})
}

func TestPanicReleasesLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		runs := 0
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				panic("boom")
			}
			w.WriteHeader(http.StatusCreated)
		}))
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the handler's panic", r)
				}
			}()
			do(h, "POST", "/x", "b", withKey("k"), withTenant("A"))
		}()
		if w := do(h, "POST", "/x", "b", withKey("k"), withTenant("A")); w.Code != http.StatusCreated || runs != 2 {
			t.Fatalf("retry after panic: %d, runs %d", w.Code, runs)
		}
	})
}

func TestBodyLimits(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	runs := 0
	big := strings.Repeat("x", 100)
	h := mw(t, httpidem.IdempotencyConfig{Store: store, MaxRequestBody: 10, MaxResponseBody: 50},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.Write([]byte(big))
		}))
	problem(t, do(h, "POST", "/x", strings.Repeat("b", 11), withKey("k1"), withTenant("A")), http.StatusRequestEntityTooLarge, httpidem.CodeBodyTooLarge)
	// Without Content-Length the limit still holds.
	r := httptestRequestNoLength("POST", "/x", strings.Repeat("b", 11))
	r.Header.Set("Idempotency-Key", "k1")
	r.Header.Set("X-Tenant", "A")
	problem(t, serve(h, r), http.StatusRequestEntityTooLarge, httpidem.CodeBodyTooLarge)

	for i := 0; i < 2; i++ {
		w := do(h, "POST", "/x", "small", withKey("k2"), withTenant("A"))
		if w.Body.String() != big || w.Header().Get(httpidem.HeaderReplayed) != "" {
			t.Fatalf("oversize response: %q replayed=%q", w.Body, w.Header().Get(httpidem.HeaderReplayed))
		}
	}
	if runs != 2 {
		t.Fatalf("oversize response stored: ran %d times, want 2", runs)
	}
}

func TestStreamedResponseNotStored(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	var d decisions
	runs := 0
	h := mw(t, httpidem.IdempotencyConfig{Store: store, OnDecision: d.record}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Write([]byte("part 1 "))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("ResponseController through the capture: %v", err)
		}
		w.Write([]byte("part 2"))
	}))
	for i := 0; i < 2; i++ {
		if w := do(h, "POST", "/x", "b", withKey("k"), withTenant("A")); w.Body.String() != "part 1 part 2" || !w.Flushed {
			t.Fatalf("streamed answer: %q flushed=%v", w.Body, w.Flushed)
		}
	}
	if runs != 2 {
		t.Fatalf("streamed response was stored: runs %d", runs)
	}
	if got := d.outcomes(); len(got) != 4 || got[1] != httpidem.OutcomeNotStored {
		t.Fatalf("decisions %v", got)
	}
}

func TestRequestBodyReachesHandler(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	var c counter
	h := mw(t, httpidem.IdempotencyConfig{Store: store}, &c)
	if w := do(h, "POST", "/x", "payload", withKey("k"), withTenant("A")); !strings.Contains(w.Body.String(), `"echo":"payload"`) {
		t.Fatalf("handler did not see the body: %s", w.Body)
	}
}

func TestRecordExpires(t *testing.T) {
	mr, rdb := startMiniredis(t, false)
	rstore := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
	defer rstore.Close()
	now := utc("2026-01-01T00:00:00Z")
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	mstore := must(httpidem.NewMemoryStore(httpidem.WithClock(clock)))
	defer mstore.Close()
	for _, c := range []struct {
		name    string
		store   testStore
		advance func(time.Duration)
	}{
		{"miniredis", rstore, mr.FastForward},
		{"memory", mstore, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs counter
			h := mw(t, httpidem.IdempotencyConfig{Store: c.store, RecordTTL: time.Hour}, &runs)
			do(h, "POST", "/x", "b", withKey("k"), withTenant("A"))
			c.advance(59 * time.Minute)
			if w := do(h, "POST", "/x", "b", withKey("k"), withTenant("A")); w.Header().Get(httpidem.HeaderReplayed) != "true" {
				t.Fatal("record gone before RecordTTL")
			}
			c.advance(2 * time.Minute)
			if w := do(h, "POST", "/x", "b", withKey("k"), withTenant("A")); w.Header().Get(httpidem.HeaderReplayed) != "" || runs.n.Load() != 2 {
				t.Fatalf("after RecordTTL: replayed=%q runs=%d", w.Header().Get(httpidem.HeaderReplayed), runs.n.Load())
			}
		})
	}
}

func httptestRequestNoLength(method, target, body string) *http.Request {
	r := httptest.NewRequest(method, target, io.NopCloser(strings.NewReader(body)))
	r.ContentLength = -1
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
