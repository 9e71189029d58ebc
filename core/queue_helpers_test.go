package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// queueDeadWaiter puts a waiter that queued and then crashed ("dead-waiter")
// at the tail of key's fair queue under prefix, its entry alive for life.
func queueDeadWaiter(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix, key string, life time.Duration) {
	t.Helper()
	q, qt := prefix+":{"+key+"}:q", prefix+":{"+key+"}:qt"
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb.RPush(ctx, q, "dead-waiter")
	rdb.ZAdd(ctx, qt, redis.Z{Score: float64(now.Add(life).UnixMilli()), Member: "dead-waiter"})
}

// waitQueueLen waits, at most 5 s, until key's fair queue under prefix
// holds n entries.
func waitQueueLen(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix, key string, n int64) {
	t.Helper()
	q := prefix + ":{" + key + "}:q"
	deadline := time.Now().Add(5 * time.Second)
	for got, _ := rdb.LLen(ctx, q).Result(); got < n; got, _ = rdb.LLen(ctx, q).Result() {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
