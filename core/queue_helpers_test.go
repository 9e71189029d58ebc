package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// queueDeadWaiter puts a waiter that queued and then crashed ("dead-waiter",
// of a Client "dead" whose grant channel nobody hears) at the tail of key's
// waiters under prefix, its Client kept in A until life from now (life ≤
// 0: not at all, as a Client that lapsed and was dropped).
func queueDeadWaiter(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix, key string, life time.Duration) {
	t.Helper()
	queueMember(ctx, t, rdb, prefix, key, "dead", "dead-waiter", life)
}

// waitQueueLen waits, at most 5 s, until key's waiters under prefix
// number n.
func waitQueueLen(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix, key string, n int64) {
	t.Helper()
	w := prefix + ":{" + key + "}:w"
	deadline := time.Now().Add(5 * time.Second)
	for got, _ := rdb.ZCard(ctx, w).Result(); got < n; got, _ = rdb.ZCard(ctx, w).Result() {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
