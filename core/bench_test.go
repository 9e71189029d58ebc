package core_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
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

func benchParallel(b *testing.B, c *core.Client) {
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
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
	c := core.NewMemory()
	defer c.Close()
	b.Run("Cycle", func(b *testing.B) { benchCycle(b, c) })
	b.Run("Parallel", func(b *testing.B) { benchParallel(b, c) })
}

func BenchmarkRedis(b *testing.B) {
	c := core.NewRedis(redistest.Client(b), core.WithKeyPrefix("latchkey-bench"))
	defer c.Close()
	b.Run("Cycle", func(b *testing.B) { benchCycle(b, c) })
	b.Run("Parallel", func(b *testing.B) { benchParallel(b, c) })
}
