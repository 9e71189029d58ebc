package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A hand-over script that go-redis runs twice (its first answer timed
// out: go-redis retries a command whose read timed out) answers 0, "not
// held": the first run made the waiter's lease, the second found the key
// no longer the releaser's. When the waiter gave up meanwhile (its ctx
// ended while the hand-over was under way), nobody knows of that lease:
// the releaser was told "not held" (so it gives nothing back) and the
// waiter is gone. The key stayed held by nobody until the waiter's TTL
// (found by a fourth review); release.lua now answers its own earlier run
// as that run would have.
func TestReview4HandOverDuplicatedToALeaver(t *testing.T) {
	h := &handHook{hold: make(chan struct{}), held: make(chan struct{})}
	c, mr := handClient(t, h)
	c.be.(*redisBackend).rdb.(*redis.Client).AddHook(dupHook{})
	ctx := context.Background()
	a, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := lockAsync(wctx, c, "k", WithTTL(time.Minute))
	offering(t, c, "k")
	released := make(chan error, 1)
	go func() { released <- a.Release(ctx) }()
	<-h.held // the hand-over is under way, its waiter reserved
	cancel()
	r := <-got
	if r.err == nil || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiter that gave up: %v, %v", r.h, r.err)
	}
	close(h.hold)
	if err := <-released; err != nil {
		t.Errorf("releaser of a hand-over sent twice: %v (its lease ended)", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for mr.Exists("ho:{k}") {
		if time.Now().After(deadline) {
			v, _ := mr.Get("ho:{k}")
			t.Fatalf("3s after the release, the key is still held by %q (TTL %v): a lease nobody knows of (the waiter gave up, the releaser was told 'not held')", v, mr.TTL("ho:{k}"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
