package echomw_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
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

func prefix(t *testing.T) string {
	return fmt.Sprintf("test:echomw:%s:%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
}

// eachStore runs f on a memory store, a miniredis one and, when it
// answers (or LATCHKEY_REQUIRE_SERVERS=1), one on the shared Redis.
func eachStore(t *testing.T, f func(t *testing.T, store testStore)) {
	t.Run("memory", func(t *testing.T) {
		s := must(httpidem.NewMemoryStore())
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := startMiniredis(t, true)
		s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		p := prefix(t)
		s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(p)))
		t.Cleanup(func() {
			s.Close()
			deleteKeys(rdb, p)
		})
		f(t, s)
	})
}

// eachLocker runs f with a memory lock client, a miniredis one and one on
// the shared Redis (mr is nil but for miniredis).
func eachLocker(t *testing.T, f func(t *testing.T, locks *core.Client, mr *miniredis.Miniredis)) {
	t.Run("memory", func(t *testing.T) {
		c := mustNew(core.NewMemory())
		t.Cleanup(func() { c.Close() })
		f(t, c, nil)
	})
	t.Run("miniredis", func(t *testing.T) {
		mr, rdb := startMiniredis(t, true)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix(t))))
		t.Cleanup(func() { c.Close() })
		f(t, c, mr)
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		p := prefix(t)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(p)))
		t.Cleanup(func() {
			c.Close()
			deleteKeys(rdb, p)
		})
		f(t, c, nil)
	})
}

// deleteKeys removes the keys under prefix from the shared Redis.
func deleteKeys(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	for iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator(); iter.Next(ctx); {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Unlink(ctx, keys[:n]...)
		keys = keys[n:]
	}
}

// tenant is the principal/subject extractor of the tests: X-Tenant.
func tenant(c echo.Context) (string, error) {
	if v := c.Request().Header.Get("X-Tenant"); v != "" {
		return v, nil
	}
	return "", errors.New("no X-Tenant")
}

// recoverMW is a minimal middleware.Recover that also returns the error
// (Echo's returns nil after rendering it), so tests see it: it turns a
// panic into an error rendered by c.Error.
func recoverMW(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v", r)
				c.Error(err)
			}
		}()
		return next(c)
	}
}

// logLine is what a request logger saw.
type logLine struct {
	status int
	err    error
}

// logger records the status and error of each request, as Echo's
// RequestLogger would see them.
type logger struct {
	mu    sync.Mutex
	lines []logLine
}

func (l *logger) mw(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		status := c.Response().Status
		if err != nil && !c.Response().Committed {
			c.Error(err) // as RequestLogger's HandleError does
			status = c.Response().Status
		}
		l.mu.Lock()
		l.lines = append(l.lines, logLine{status, err})
		l.mu.Unlock()
		return err
	}
}

func (l *logger) last() logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines[len(l.lines)-1]
}

type reqOpt func(*http.Request)

func withKey(k string) reqOpt       { return func(r *http.Request) { r.Header.Set("Idempotency-Key", k) } }
func withTenant(tn string) reqOpt   { return func(r *http.Request) { r.Header.Set("X-Tenant", tn) } }
func withHeader(k, v string) reqOpt { return func(r *http.Request) { r.Header.Set(k, v) } }

func newRequest(method, target, body string, opts ...reqOpt) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	for _, o := range opts {
		o(r)
	}
	return r
}

// serve sends a request through the router.
func serve(e *echo.Echo, method, target, body string, opts ...reqOpt) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.ServeHTTP(w, newRequest(method, target, body, opts...))
	return w
}

// isProblem checks a problem answer.
func isProblem(t *testing.T, w *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	if w.Code != status || w.Header().Get("Content-Type") != httpidem.ProblemContentType ||
		w.Header().Get("Cache-Control") != "no-store" || !strings.Contains(w.Body.String(), `"code":"`+code+`"`) {
		t.Fatalf("got %d %v %s; want a %d problem with code %s", w.Code, w.Header(), w.Body, status, code)
	}
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

func (d *decisions) outcomes() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var o []string
	for _, x := range d.got {
		o = append(o, string(x.Outcome))
	}
	return strings.Join(o, " ")
}

// redisClientFailingFast returns a client that does not retry.
func redisClientFailingFast(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
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
