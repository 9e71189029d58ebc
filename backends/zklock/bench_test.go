package zklock_test

import (
	"context"
	"testing"
)

// BenchmarkCycle: TryLock and Release of one key, one after the other, on
// the loopback server (list, create, list, read; then delete).
func BenchmarkCycle(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	for b.Loop() {
		l, err := c.TryLock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
