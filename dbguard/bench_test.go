package dbguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/internal/redistest"
)

// benchBuyers is the number of concurrent buyers in BenchmarkStrategies.
const benchBuyers = 32

// BenchmarkStrategies measures deductions per second of each strategy on
// PostgreSQL ($DATABASE_URL or the local default) with 32 concurrent
// buyers, on one hot SKU and spread over 100 SKUs. Locked and Auto take
// their locks on the shared Redis ($REDIS_ADDR or 127.0.0.1:6379). Missing
// servers skip it (fail it with LATCHKEY_REQUIRE_SERVERS=1).
//
//	go test -run '^$' -bench Strategies -benchtime 3s ./dbguard
//
// Metrics: deductions/s (successful, all buyers together), conflicts/op
// (optimistic writes that lost and retried), busy/op (deductions that gave
// up: ErrBusy), fallbacks/op (Auto deductions made optimistically).
func BenchmarkStrategies(b *testing.B) {
	db := openPostgres(b)
	db.SetMaxOpenConns(benchBuyers + 8)
	db.SetMaxIdleConns(benchBuyers + 8)
	rdb := redistest.Client(b)
	prefix := "dbguard-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	locker := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	b.Cleanup(func() {
		locker.Close()
		deletePrefix(b, rdb, prefix)
	})

	for _, w := range []struct {
		name string
		skus int
	}{{"hot-sku", 1}, {"100-skus", 100}} {
		skus := make([]string, w.skus)
		stock := make(map[string]int64, w.skus)
		for i := range skus {
			skus[i] = fmt.Sprintf("sku-%03d", i)
			stock[skus[i]] = 1 << 50
		}
		for _, s := range allStrategies {
			b.Run(w.name+"/"+s.String(), func(b *testing.B) {
				opts := []dbguard.Option{dbguard.WithStrategy(s)}
				if s == dbguard.Locked || s == dbguard.Auto {
					opts = append(opts, dbguard.WithLocks(locker))
				}
				g, _ := newGuard(b, db, stock, opts...)
				ctx := context.Background()
				b.SetParallelism((benchBuyers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
					for pb.Next() {
						err := g.Deduct(ctx, skus[rng.IntN(len(skus))], 1)
						if err != nil && !errors.Is(err, dbguard.ErrBusy) {
							b.Error(err)
							return
						}
					}
				})
				elapsed := time.Since(start)
				b.StopTimer()
				st := g.Stats()
				n := float64(b.N)
				b.ReportMetric(float64(st.Deductions)/elapsed.Seconds(), "deductions/s")
				b.ReportMetric(float64(st.Conflicts)/n, "conflicts/op")
				b.ReportMetric(float64(st.Busy)/n, "busy/op")
				b.ReportMetric(float64(st.Fallbacks)/n, "fallbacks/op")
			})
		}
	}
}
