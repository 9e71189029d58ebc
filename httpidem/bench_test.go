package httpidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// roundTrips counts the commands and pipelines a client sends: each is one
// network round trip.
type roundTrips struct{ n atomic.Int64 }

var _ redis.Hook = (*roundTrips)(nil)

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// benchBackends gives each benchmark a Redis client with a round-trip
// counter: miniredis always, the real Redis when it answers (a missing one
// skips, or fails with LATCHKEY_REQUIRE_SERVERS=1).
func benchBackends(b *testing.B, f func(b *testing.B, rdb *redis.Client, rt *roundTrips)) {
	b.Run("miniredis", func(b *testing.B) {
		mr := miniredis.RunT(b)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		rt := &roundTrips{}
		rdb.AddHook(rt)
		f(b, rdb, rt)
	})
	b.Run("redis", func(b *testing.B) {
		addr := redistest.Addr(b)
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		rt := &roundTrips{}
		rdb.AddHook(rt)
		f(b, rdb, rt)
	})
}

// measure runs op b.N times and reports round trips per op.
func measure(b *testing.B, rt *roundTrips, op func(i int)) {
	b.Helper()
	op(-1) // warm up: load the scripts, open the connection
	b.ReportAllocs()
	start := rt.n.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		op(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(rt.n.Load()-start)/float64(b.N), "roundtrips/op")
}

func benchRequest(key string) *http.Request {
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"sku":42,"qty":1}`))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	r.Header.Set("X-Tenant", "acme")
	return r
}

var created = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"order":1}`))
})

// BenchmarkIdempotency measures the middleware's cost per request: a
// handler alone (baseline), a first request (lease, record check, store,
// release) and a replay.
func BenchmarkIdempotency(b *testing.B) {
	benchBackends(b, func(b *testing.B, rdb *redis.Client, rt *roundTrips) {
		p := "bench:httpidem:" + randomSuffix()
		store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(p)))
		defer store.Close()
		defer deleteKeys(rdb, p)
		h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: tenant})(created)
		b.Run("baseline", func(b *testing.B) {
			measure(b, rt, func(int) { created.ServeHTTP(httptest.NewRecorder(), benchRequest("")) })
		})
		b.Run("first", func(b *testing.B) {
			run := randomSuffix()
			measure(b, rt, func(i int) {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest(run+strconv.Itoa(i)))
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			})
		})
		b.Run("replay", func(b *testing.B) {
			key := "replay-" + randomSuffix()
			measure(b, rt, func(int) {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest(key))
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			})
		})
	})
}

// BenchmarkDaily measures a gated vote: a first claim and a duplicate.
func BenchmarkDaily(b *testing.B) {
	benchBackends(b, func(b *testing.B, rdb *redis.Client, rt *roundTrips) {
		p := "bench:httpidem:" + randomSuffix()
		store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(p)))
		defer store.Close()
		defer deleteKeys(rdb, p)
		h := httpidem.Daily(httpidem.DailyConfig{
			Store: store, Scope: "vote",
			Subject: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		vote := func(user string) int {
			r := httptest.NewRequest("POST", "/vote", nil)
			r.Header.Set("X-User", user)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		b.Run("first", func(b *testing.B) {
			run := randomSuffix()
			measure(b, rt, func(i int) {
				if c := vote(run + strconv.Itoa(i)); c != http.StatusOK {
					b.Fatalf("status %d", c)
				}
			})
		})
		b.Run("duplicate", func(b *testing.B) {
			u := "dup-" + randomSuffix()
			vote(u)
			measure(b, rt, func(int) {
				if c := vote(u); c != http.StatusConflict {
					b.Fatalf("status %d", c)
				}
			})
		})
	})
}

var suffix atomic.Int64

func randomSuffix() string {
	return strconv.FormatInt(nanotime(), 36) + "-" + strconv.FormatInt(suffix.Add(1), 36)
}

func nanotime() int64 { return time.Now().UnixNano() }
