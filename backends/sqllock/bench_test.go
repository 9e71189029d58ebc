package sqllock_test

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// benchTargets are the databases and, for comparison in the same run, the
// shared Redis (a prefix of its own, its keys deleted at the end).
func benchTargets() []struct {
	name      string
	newClient func(b *testing.B) (func() *core.Client, error)
} {
	type target = struct {
		name      string
		newClient func(b *testing.B) (func() *core.Client, error)
	}
	var out []target
	for _, d := range databases {
		out = append(out, target{d.name, func(b *testing.B) (func() *core.Client, error) {
			db := d.open(b)
			opt := table(b, db)
			return func() *core.Client { return newClient(b, d.open(b), opt) }, nil
		}})
	}
	out = append(out, target{"redis", func(b *testing.B) (func() *core.Client, error) {
		prefix := "lkbench-" + rand.Text()[:8]
		admin := redistest.Client(b)
		b.Cleanup(func() {
			keys, _ := admin.Keys(context.Background(), prefix+":*").Result()
			if len(keys) > 0 {
				admin.Del(context.Background(), keys...)
			}
		})
		return func() *core.Client {
			rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
			b.Cleanup(func() { rdb.Close() })
			c, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return c
		}, nil
	}})
	return out
}

// BenchmarkCycle: an uncontended TryLock + Release on each database (one
// transaction of five statements to acquire, one statement to release, a
// NOTIFY more on PostgreSQL).
func BenchmarkCycle(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			mk, _ := tg.newClient(b)
			c := mk()
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				l, err := c.TryLock(ctx, "cycle")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHandoff: 4 Clients (4 processes) contend on one key with a
// 1 ms hold; it reports acquisitions per second and the mean wait.
func BenchmarkHandoff(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			mk, _ := tg.newClient(b)
			var clients []*core.Client
			for range 4 {
				clients = append(clients, mk())
			}
			ctx := context.Background()
			var (
				mu     sync.Mutex
				waited time.Duration
				wg     sync.WaitGroup
			)
			per := max(b.N/len(clients), 1)
			start := time.Now()
			for _, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						t0 := time.Now()
						l, err := c.Lock(ctx, "handoff", core.WithWaitTimeout(time.Minute))
						if err != nil {
							b.Error(err)
							return
						}
						w := time.Since(t0)
						time.Sleep(time.Millisecond)
						if err := l.Release(ctx); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						waited += w
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			n := per * len(clients)
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "acq/s")
			b.ReportMetric(float64(waited.Microseconds())/float64(n), "wait-µs/acq")
		})
	}
}
