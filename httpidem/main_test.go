package httpidem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startMiniredis starts a miniredis; with clock set its keys age in real time.
func startMiniredis(t *testing.T, clock bool) (*miniredis.Miniredis, *redis.Client) {
	return redistest.Miniredis(t, clock)
}

// prefix returns a key prefix unique to the test.
func prefix(t *testing.T) string {
	return fmt.Sprintf("test:httpidem:%s:%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
}

// deleteKeys removes the keys under prefix from a shared Redis.
func deleteKeys(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 500 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

// backend is a store under test.
type backend struct {
	name string
	new  func(t *testing.T) testStore
}

// backends are the stores every behaviour test runs on: memory, miniredis
// and, when it answers (or LATCHKEY_REQUIRE_SERVERS=1), the real Redis.
var backends = []backend{
	{"memory", func(t *testing.T) testStore {
		s := must(httpidem.NewMemoryStore())
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"miniredis", func(t *testing.T) testStore {
		_, rdb := startMiniredis(t, true)
		s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"redis", func(t *testing.T) testStore {
		rdb := redistest.Client(t)
		p := prefix(t)
		s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(p)))
		t.Cleanup(func() {
			s.Close()
			deleteKeys(rdb, p)
		})
		return s
	}},
}

func eachBackend(t *testing.T, f func(t *testing.T, store testStore)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.new(t)) })
	}
}

// counter is a handler that counts its runs and answers 201 with a body
// derived from the request, a Location and a cookie.
type counter struct{ n atomic.Int64 }

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.n.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/42")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Internal", "nope")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":%d,"echo":%q}`, n, body)
}

// tenant reads the principal from X-Tenant.
func tenant(r *http.Request) (string, error) {
	if v := r.Header.Get("X-Tenant"); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("no X-Tenant")
}

type reqOpt func(*http.Request)

func withKey(k string) reqOpt       { return func(r *http.Request) { r.Header.Set("Idempotency-Key", k) } }
func withTenant(tn string) reqOpt   { return func(r *http.Request) { r.Header.Set("X-Tenant", tn) } }
func withHeader(k, v string) reqOpt { return func(r *http.Request) { r.Header.Add(k, v) } }
func withContext(ctx context.Context) reqOpt {
	return func(r *http.Request) { *r = *r.WithContext(ctx) }
}

// do serves one request through h and returns the recorded response.
func do(h http.Handler, method, target, body string, opts ...reqOpt) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	for _, o := range opts {
		o(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problem decodes a problem answer and checks its framing.
func problem(t *testing.T, w *httptest.ResponseRecorder, status int, code string) map[string]any {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != httpidem.ProblemContentType {
		t.Fatalf("Content-Type %q, want %q", ct, httpidem.ProblemContentType)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q, want no-store", cc)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p["code"] != code || p["status"] != float64(status) || p["type"] != "about:blank" || p["title"] != http.StatusText(status) {
		t.Fatalf("problem %v, want code %q status %d", p, code, status)
	}
	return p
}

// decisions collects OnDecision reports.
type decisions struct {
	mu  sync.Mutex
	got []httpidem.Decision
}

func (d *decisions) record(_ context.Context, x httpidem.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, x)
}

func (d *decisions) outcomes() []httpidem.Outcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	var o []httpidem.Outcome
	for _, x := range d.got {
		o = append(o, x.Outcome)
	}
	return o
}

func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// deadRedis returns a client of a Redis that is gone, failing fast.
func deadRedis(t *testing.T) *redis.Client {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	mr.Close()
	return rdb
}

// testStore is what the tests need of a store: both protocols, counting.
type testStore interface {
	httpidem.IdempotencyStore
	httpidem.ClaimCounter
}

// must returns v, or panics with err: for store constructors in tests.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// mustPanic calls f and checks that it panics with an error matching want;
// it returns that error.
func mustPanic(t *testing.T, want error, f func()) (got error) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		err, ok := r.(error)
		if !ok || !errors.Is(err, want) {
			t.Fatalf("panic %v, want an error matching %v", r, want)
		}
		got = err
	}()
	f()
	return nil
}
