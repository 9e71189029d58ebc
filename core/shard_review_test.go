package core_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// TestShardSweepDoesNotStallNotifier: the sharded sweeper unsubscribes
// idle channels under notifier.mu, while a shard connection's receive loop
// may be inside go-redis's reconnect (PubSub.mu held while it dials a
// master that does not answer). The sweep must not wait for that dial —
// it sends in the background — or every join, leave and delivery of the
// whole Client would, and a Lock with a 200 ms wait would return only when
// the dial gave up. (An adversarial review's finding; it failed before.)
func TestShardSweepDoesNotStallNotifier(t *testing.T) {
	for _, swept := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "swept"}[swept], func(t *testing.T) { sweepStall(t, swept) })
	}
}

func sweepStall(t *testing.T, swept bool) {
	srv := redistest.StartServer(t)
	ctx := ctxFor(t, time.Minute)
	var blackhole atomic.Bool
	wrdb := redis.NewClient(&redis.Options{Addr: srv.Addr(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if blackhole.Load() { // a master that does not answer (DialTimeout 5 s)
				select {
				case <-time.After(4 * time.Second):
				case <-ctx.Done():
				}
				return nil, errors.New("dial: no answer")
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	defer wrdb.Close()
	hrdb := srv.Client(t)
	prefix := testPrefix()
	holder := mustNew(core.NewRedis(hrdb, core.WithKeyPrefix(prefix)))
	defer holder.Close()
	waiter := mustNew(core.NewRedis(wrdb, core.WithKeyPrefix(prefix), core.WithShardedNotify(true)))
	defer waiter.Close()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := holder.TryLock(ctx, k, core.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	// "a" keeps the shard connection busy; "b" leaves its channel idle,
	// to be swept two seconds later.
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	adone := make(chan struct{})
	go func() {
		defer close(adone)
		_, _ = waiter.Lock(actx, "a", core.WithWaitTimeout(30*time.Second))
	}()
	time.Sleep(200 * time.Millisecond)
	if swept {
		if _, err := waiter.Lock(ctx, "b", core.WithWaitTimeout(300*time.Millisecond)); !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("b: %v", err)
		}
	}
	idle := time.Now()
	// Warm the command pool, so that no command needs a dial.
	done := make(chan struct{})
	for range 8 {
		go func() { _ = wrdb.Do(ctx, "DEBUG", "SLEEP", "0.05").Err(); done <- struct{}{} }()
	}
	for range 8 {
		<-done
	}
	time.Sleep(300 * time.Millisecond)
	blackhole.Store(true)
	if err := hrdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(idle.Add(2600 * time.Millisecond))) // b swept meanwhile
	freeDone := make(chan time.Duration, 1)
	go func() { // a free key: taken at the first attempt, which reads heard (notifier.mu)
		start := time.Now()
		l, err := waiter.Lock(ctx, "free", core.WithWaitTimeout(200*time.Millisecond))
		if err == nil {
			_ = l.Release(ctx)
		}
		freeDone <- time.Since(start)
	}()
	start := time.Now()
	_, err := waiter.Lock(ctx, "a", core.WithWaitTimeout(200*time.Millisecond)) // its channel is subscribed already
	took := time.Since(start)
	if free := <-freeDone; free > time.Second {
		t.Errorf("a Lock of a free key took %v", free.Round(time.Millisecond))
	}
	blackhole.Store(false)
	acancel()
	<-adone
	if took > time.Second || !errors.Is(err, core.ErrNotAcquired) || errors.Is(err, core.ErrUnavailable) {
		t.Errorf("a Lock with a 200 ms wait took %v, and returned %v", took.Round(time.Millisecond), err)
	}
}
