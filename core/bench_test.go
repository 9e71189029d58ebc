package core_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// benchCycle measures TryLock+Release cycles on distinct keys.
func benchCycle(b *testing.B, c *core.Client) {
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := c.TryLock(ctx, keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// parallelism × GOMAXPROCS goroutines cycle in the parallel benchmarks:
// 16 on two cores, as bench's parallel scenario runs.
const parallelism = 8

func benchParallel(b *testing.B, c *core.Client) {
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:p:" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			l, err := c.TryLock(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkMemory(b *testing.B) {
	c := mustNew(core.NewMemory())
	defer c.Close()
	b.Run("Cycle", func(b *testing.B) { benchCycle(b, c) })
	b.Run("Parallel", func(b *testing.B) { benchParallel(b, c) })
}

// BenchmarkRedis runs on a private redis-server, so that it can report the
// server's own CPU time per cycle (INFO commandstats) as redis-µs/op, and
// the commands it executed per cycle (those scripts ran included) as
// redis-cmds/op; redis-cpu-µs/op is the server's whole CPU (INFO cpu),
// networking included.
func BenchmarkRedis(b *testing.B) {
	rdb := redistest.StartServer(b).Client(b)
	c := mustNew(core.NewRedis(rdb))
	defer c.Close()
	nodes := []*redis.Client{rdb}
	withServerCPU := func(f func(*testing.B, *core.Client)) func(*testing.B) {
		return func(b *testing.B) { measured(b, nodes, func() { f(b, c) }) }
	}
	b.Run("Cycle", withServerCPU(benchCycle))
	b.Run("Parallel", withServerCPU(benchParallel))
	// The floor to compare with: SET NX PX, then a compare-and-delete
	// script (EVALSHA), on the same server and Redis client.
	raw := func(f func(*testing.B, func(key string))) func(*testing.B) {
		return func(b *testing.B) {
			ctx := context.Background()
			if err := rawRelease.Load(ctx, rdb).Err(); err != nil {
				b.Fatal(err)
			}
			measured(b, nodes, func() {
				f(b, func(key string) {
					tok := rand.Text()
					ok, err := rdb.SetNX(ctx, key, tok, 30*time.Second).Result()
					if err != nil || !ok {
						b.Fatal(ok, err)
					}
					if err := rawRelease.Run(ctx, rdb, []string{key}, tok).Err(); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
	b.Run("RawCycle", raw(benchRawCycle))
	b.Run("RawParallel", raw(benchRawParallel))
}

var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

// benchRawCycle is benchCycle for the floor's cycle.
func benchRawCycle(b *testing.B, cycle func(key string)) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "bench:raw:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cycle(keys[i%len(keys)])
	}
}

// benchRawParallel is benchParallel for the floor's cycle.
func benchRawParallel(b *testing.B, cycle func(key string)) {
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:raw:p:" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			cycle(key)
		}
	})
}

// measured runs the benchmark body run with the servers' statistics
// reset, and reports per op: this process's CPU (client-µs/op), and summed
// over the servers, the CPU spent in commands (redis-µs/op, INFO
// commandstats), the commands executed (redis-cmds/op) and the whole CPU
// (redis-cpu-µs/op, INFO cpu).
func measured(b *testing.B, servers []*redis.Client, run func()) {
	var cpu0 float64
	for _, n := range servers {
		n.ConfigResetStat(context.Background())
		cpu0 += serverCPU(b, n)
	}
	self := selfMicros()
	run()
	b.StopTimer()
	b.ReportMetric((selfMicros()-self)/float64(b.N), "client-µs/op")
	var usec, calls, cpu float64
	for _, n := range servers {
		u, k := serverStats(b, n)
		usec, calls, cpu = usec+u, calls+k, cpu+serverCPU(b, n)
	}
	b.ReportMetric(usec/float64(b.N), "redis-µs/op")
	b.ReportMetric(calls/float64(b.N), "redis-cmds/op")
	b.ReportMetric((cpu-cpu0)/float64(b.N), "redis-cpu-µs/op")
}

// selfMicros is the CPU time (user and system) this process has used, in
// microseconds: every goroutine's, the runtime's and the Redis client's.
func selfMicros() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// serverStats sums the CPU microseconds Redis spent in commands and the
// commands it executed (INFO commandstats; CONFIG and INFO left out).
func serverStats(b *testing.B, rdb *redis.Client) (usec, calls float64) {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(s, "\n") {
		if _, stats, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(line, "cmdstat_") &&
			!strings.HasPrefix(line, "cmdstat_config") && !strings.HasPrefix(line, "cmdstat_info") {
			for _, kv := range strings.Split(strings.TrimSpace(stats), ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					usec += f
				}
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					calls += f
				}
			}
		}
	}
	return usec, calls
}

// serverCPU is the CPU seconds a server used, in µs (INFO cpu: user and
// system, its cluster bus and networking included, which commandstats
// leaves out).
func serverCPU(b *testing.B, rdb *redis.Client) float64 {
	s, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f * 1e6
		}
	}
	return total
}

// BenchmarkRedisCluster runs BenchmarkRedis's cycles on a private
// 3-master Cluster. redis-µs/op and redis-cmds/op are summed over the
// nodes, and redis-cpu-µs/op is their whole CPU (INFO cpu), which counts
// what commandstats does not: the cluster bus, over which a PUBLISH
// reaches every node.
func BenchmarkRedisCluster(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	var nodes []*redis.Client
	for _, n := range cl.Nodes() {
		nodes = append(nodes, n.Client(b))
	}
	c := mustNew(core.NewRedis(cl.Client(b)))
	defer c.Close()
	run := func(f func(*testing.B, *core.Client)) func(*testing.B) {
		return func(b *testing.B) { measured(b, nodes, func() { f(b, c) }) }
	}
	b.Run("Cycle", run(benchCycle))
	b.Run("Parallel", run(benchParallel))
}

// BenchmarkRedisClusterNotify hands keys over on a private 3-master
// Cluster, with classic pub/sub (the default) and sharded
// (WithShardedNotify(true)): two Clients, four goroutines each, on eight keys
// spread over the masters; each op is one Lock, a 100 µs hold and its
// Release, so most releases have a waiter to tell. redis-cpu-µs/op is the
// three masters' whole CPU per op, the cluster bus included: a PUBLISH
// reaches every master over it, an SPUBLISH stays on the key's. Run with
// -count to interleave the two.
func BenchmarkRedisClusterNotify(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	var nodes []*redis.Client
	for _, n := range cl.Nodes() {
		nodes = append(nodes, n.Client(b))
	}
	for _, mode := range []struct {
		name    string
		sharded bool
	}{{"Classic", false}, {"Sharded", true}} {
		b.Run(mode.name, func(b *testing.B) {
			opts := []core.Option{core.WithKeyPrefix("bench-" + rand.Text()[:8]), core.WithShardedNotify(mode.sharded)}
			clients := []*core.Client{mustNew(core.NewRedis(cl.Client(b), opts...)), mustNew(core.NewRedis(cl.Client(b), opts...))}
			defer func() {
				for _, c := range clients {
					c.Close()
				}
			}()
			measured(b, nodes, func() { benchHandoffs(b, clients, 4, 8, 100*time.Microsecond) })
		})
	}
}

// benchHandoffs runs b.N Lock, hold, Release ops from perClient goroutines
// of each client, on keys keys.
func benchHandoffs(b *testing.B, clients []*core.Client, perClient, keys int, hold time.Duration) {
	ctx := context.Background()
	var next atomic.Int64
	done := make(chan struct{})
	b.ResetTimer()
	for _, c := range clients {
		for range perClient {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					l, err := c.Lock(ctx, "h"+strconv.FormatInt(i%int64(keys), 10), core.WithWaitTimeout(30*time.Second))
					if err != nil {
						b.Error(err)
						return
					}
					time.Sleep(hold)
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
	}
	for range len(clients) * perClient {
		<-done
	}
}
