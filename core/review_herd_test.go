package core_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// slowDial delays every new connection while on is set.
type slowDial struct {
	on atomic.Bool
	d  time.Duration
}

func (h *slowDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.on.Load() {
			t := time.NewTimer(h.d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (h *slowDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *slowDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Lock of a free key costs one round trip: it must not wait for the
// Client's grant-channel subscription (a new connection, a SUBSCRIBE and
// its confirmation) that only a waiter that queues could use. Here new
// connections are slow (a far server, a TLS handshake, a pub/sub ACL that
// never confirms): a Lock with a 300 ms budget of a free key must succeed.
func TestReviewFreeLockDoesNotWaitForGrantChannel(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	h := &slowDial{d: 2 * time.Second}
	rdb.AddHook(h)
	if err := rdb.Ping(context.Background()).Err(); err != nil { // one pooled connection
		t.Fatal(err)
	}
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	h.on.Store(true) // from now on, only a new connection (the pub/sub one) is slow
	defer h.on.Store(false)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := c.Lock(ctx, "free")
	if err != nil {
		t.Fatalf("Lock of a free key failed after %v: %v", time.Since(start), err)
	}
	t.Logf("Lock of a free key took %v", time.Since(start))
	_ = l.Release(context.Background())
}

// Observe reports a new holder promptly when the key passes to a queued
// waiter of another process: the release's grant now goes to the grantee's
// own channel, but observers of the key must still be woken (they were by
// the grant on the key's channel), not left asleep until the previous
// holder's lease would have expired.
func TestReviewObserveSeesGrantedHandoff(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := ctxFor(t, 30*time.Second)
	open := func() *core.Client {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b, o := open(), open(), open()

	holder, err := a.Lock(ctx, "k", core.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	infos := o.Observe(octx, "k")
	first := <-infos
	if !first.Held || first.Token != holder.Token() {
		t.Fatalf("first report %+v, want the holder", first)
	}

	got := fairLockAsync(ctx, t, b, "k")
	waitQueueLen(ctx, t, rdb, prefix, "k", 1)
	for _, v := range rdb.ZRange(ctx, prefix+":{k}:w", 0, -1).Val() {
		if strings.HasSuffix(v, "|") {
			t.Logf("the waiter queued without a grant channel (%q): the check below is weaker", v)
		}
	}

	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	timeout := time.After(3 * time.Second)
	for {
		select {
		case info := <-infos:
			if info.Held && info.Token == l.Token() {
				t.Logf("the observer saw the new holder %v after the release", time.Since(released))
				return
			}
		case <-timeout:
			t.Fatalf("3 s after a release handed the key to a queued waiter, the observer had not reported the new holder")
		}
	}
}
