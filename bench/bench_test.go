package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisAddr returns the Redis to test against ($REDIS_ADDR or the default
// 127.0.0.1:6379). Without one the test is skipped, or fails when
// LATCHKEY_REQUIRE_SERVERS=1.
func redisAddr(tb testing.TB) string {
	tb.Helper()
	addr := envOr("REDIS_ADDR", "127.0.0.1:6379")
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		msg := fmt.Sprintf("no Redis at %s (set REDIS_ADDR): %v", addr, err)
		if os.Getenv("LATCHKEY_REQUIRE_SERVERS") == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return addr
}

// singleNodeDrivers are the lock drivers that run against one server (the
// primitives have BenchmarkPrimitives).
func singleNodeDrivers() []string {
	var out []string
	for _, d := range driverNames() {
		if registry[d].nodes == 1 && !registry[d].primitive {
			out = append(out, d)
		}
	}
	return out
}

// benchDriver opens a driver for a benchmark and removes its keys afterwards.
func benchDriver(b *testing.B, name string) (Driver, *Counter, string) {
	addr := redisAddr(b)
	c := &Counter{}
	d, err := openDriver(name, openArgs{addrs: []string{addr}, ttl: 10 * time.Second, counter: c})
	if err != nil {
		b.Fatal(err)
	}
	runID := fmt.Sprintf("gobench%d", time.Now().UnixNano())
	b.Cleanup(func() {
		d.Close()
		admin := redis.NewClient(&redis.Options{Addr: addr})
		defer admin.Close()
		if err := cleanup([]*redis.Client{admin}, runID); err != nil {
			b.Error(err)
		}
	})
	prefix := "lkbench:" + runID + ":"
	// Warm up: open the pool's connections and load scripts before timing.
	if _, _, err := cycleLoop(context.Background(), []Driver{d}, 16, 64, prefix+"warm:", false); err != nil {
		b.Fatal(err)
	}
	return d, c, prefix
}

func reportCmds(b *testing.B, c *Counter, before Counts) {
	d := c.Snapshot().Sub(before)
	b.ReportMetric(float64(d.Cmds)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(d.Wire)/float64(b.N), "wire-cmds/op")
}

// BenchmarkSerial: one goroutine, acquire+release cycles on distinct keys.
func BenchmarkSerial(b *testing.B) {
	for _, name := range singleNodeDrivers() {
		b.Run(name, func(b *testing.B) {
			d, c, prefix := benchDriver(b, name)
			ctx := context.Background()
			before := c.Snapshot()
			b.ResetTimer()
			for i := range b.N {
				h, err := d.TryAcquire(ctx, prefix+fmt.Sprint(i))
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCmds(b, c, before)
		})
	}
}

// BenchmarkParallel: 16 goroutines (whatever GOMAXPROCS is), acquire+release
// cycles on distinct keys.
func BenchmarkParallel(b *testing.B) {
	for _, name := range singleNodeDrivers() {
		b.Run(name, func(b *testing.B) {
			d, c, prefix := benchDriver(b, name)
			ctx := context.Background()
			var next atomic.Int64
			var failed atomic.Pointer[error]
			b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			before := c.Snapshot()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					h, err := d.TryAcquire(ctx, prefix+fmt.Sprint(next.Add(1)))
					if err == nil {
						err = h.Release(ctx)
					}
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
			b.StopTimer()
			if p := failed.Load(); p != nil {
				b.Fatal(*p)
			}
			reportCmds(b, c, before)
		})
	}
}

// BenchmarkPrimitives runs each latchkey primitive, and raw and latchkey's
// mutex as the references, in two shapes:
//
//   - <driver>/uncontended: one goroutine, acquire+release cycles on
//     distinct keys (the serial scenario);
//   - <driver>/contended: b.N acquisitions by 8 goroutines on one key, each
//     holding 1 ms (the contended scenario), reporting acq/s and the most
//     holders seen at once: 4 for the semaphore, up to 8 for read holds.
func BenchmarkPrimitives(b *testing.B) {
	for _, name := range primitiveDrivers(nil) {
		b.Run(name+"/uncontended", func(b *testing.B) {
			d, c, prefix := benchDriver(b, name)
			ctx := context.Background()
			before := c.Snapshot()
			b.ResetTimer()
			for i := range b.N {
				h, err := d.TryAcquire(ctx, prefix+fmt.Sprint(i))
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCmds(b, c, before)
		})
		b.Run(name+"/contended", func(b *testing.B) {
			d, c, prefix := benchDriver(b, name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := Config{Driver: name, Workers: primitiveWorkers, Hold: time.Millisecond, WaitTimeout: 10 * time.Second}
			ct := newContention(cfg, b.N)
			before := c.Snapshot()
			b.ResetTimer()
			start := time.Now()
			err := ct.run(ctx, []Driver{d}, prefix+"lock")
			elapsed := time.Since(start)
			b.StopTimer()
			var r Result
			ct.report(&r, elapsed)
			if err != nil || r.Ops != b.N || r.Overlaps+r.Timeouts+r.Errors+r.FenceBad > 0 {
				b.Fatalf("%d of %d acquisitions, overlaps %d, timeouts %d, errors %d, fence regressions %d: %v",
					r.Ops, b.N, r.Overlaps, r.Timeouts, r.Errors, r.FenceBad, err)
			}
			b.ReportMetric(r.Rate, "acq/s")
			b.ReportMetric(float64(r.MostInside), "holders")
			reportCmds(b, c, before)
		})
	}
}

// TestBenchmarkNames keeps the sub-benchmark names the README quotes.
func TestBenchmarkNames(t *testing.T) {
	got := strings.Join(singleNodeDrivers(), " ")
	for _, want := range []string{"raw", "redislock", "redsync"} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("driver %q not registered (have %s)", want, got)
		}
	}
}
