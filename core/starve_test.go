package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// TestNoStarvation: in the default (unfair) mode, holders that release and
// at once take the key again — they need no wake-up, so they win nearly
// every race against a woken waiter, all the more when that waiter's link
// is a few milliseconds slower — do not starve it: once it has waited
// past the starvation threshold it queues, and the key is handed over in
// arrival order until the queue drains.
func TestNoStarvation(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := faultRedis(t, srv.Addr())
	fp := startProxy(t, srv.Addr())
	fp.delay(down, 3*time.Millisecond, 0)
	prefix := testPrefix()
	ctx, cancel := context.WithCancel(ctxFor(t, 60*time.Second))
	var wg sync.WaitGroup
	for range 3 {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := c.Lock(ctx, "hot", core.WithWaitTimeout(20*time.Second))
				if err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond)
				l.Release(context.Background())
			}
		})
	}
	victim := mustNew(core.NewRedis(faultRedis(t, fp.Addr()), core.WithKeyPrefix(prefix)))
	defer victim.Close()
	time.Sleep(50 * time.Millisecond)
	for i := range 5 {
		start := time.Now()
		l, err := victim.Lock(ctx, "hot", core.WithWaitTimeout(3*time.Second))
		if err != nil {
			t.Fatalf("acquisition %d: the waiter starved: %v", i, err)
		}
		t.Logf("acquisition %d after %v", i, time.Since(start).Round(time.Millisecond))
		l.Release(ctx)
	}
	cancel()
	wg.Wait()
}
