package core_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
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

// holderAndWaiter returns a context bounded by d, the shared Redis, a
// prefix of the test's own, and two Clients on them (a, to hold; w, with a
// go-redis client of its own, to wait), closed when the test ends.
func holderAndWaiter(t *testing.T, d time.Duration) (context.Context, redis.UniversalClient, string, *core.Client, *core.Client) {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { a.Close() })
	w := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { w.Close() })
	return ctxFor(t, d), rdb, prefix, a, w
}

// fairLockAsync starts c.Lock(ctx, key, WithFair(), a 20 s wait) and
// returns the channel its lock comes on (nil, the error reported, if it
// failed).
func fairLockAsync(ctx context.Context, t *testing.T, c *core.Client, key string) <-chan *core.Lock {
	got := make(chan *core.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, key, core.WithFair(), core.WithWaitTimeout(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// heldWithDeadQueued takes key "k" under prefix with a (fair, TTL a
// minute) and queues behind it a dead waiter of each Client named in
// clients, in order ("dead-1", "dead-2", …), each Client kept in A until
// life from now; it returns the holder's lock.
func heldWithDeadQueued(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix string, a *core.Client, life time.Duration, clients ...string) *core.Lock {
	t.Helper()
	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		queueMember(ctx, t, rdb, prefix, "k", c, "dead-"+strconv.Itoa(i+1), life)
	}
	return holder
}
