package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// A grant to a queued waiter is published on its own Client's grant
// channel, not on the lease's channel: one handoff reaches one process,
// however many processes wait on the key. The grantee is woken by it —
// sooner than any fallback poll (at least 800 ms) — and a process that
// merely subscribes to the key hears no grant.
func TestGrantReachesOneClient(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := ctxFor(t, 30*time.Second)
	open := func() *core.Client {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b, c := open(), open(), open()

	lease := prefix + ":{k}"
	ps := rdb.Subscribe(ctx, lease)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	heard := make(chan []string)
	go func() {
		var msgs []string
		for m := range ps.Channel() {
			msgs = append(msgs, m.Payload)
		}
		heard <- msgs
	}()

	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		l  *core.Lock
		at time.Time
	}
	wait := func(cl *core.Client, queued int64) chan got {
		ch := make(chan got, 1)
		go func() {
			l, err := cl.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Error(err)
			}
			ch <- got{l, time.Now()}
		}()
		waitQueueLen(ctx, t, rdb, prefix, "k", queued)
		return ch
	}
	gotB := wait(b, 1)
	gotC := wait(c, 2)

	for i, next := range []struct {
		prev *core.Lock
		ch   chan got
	}{{holder, gotB}, {nil, gotC}} {
		prev := next.prev
		if prev == nil {
			prev = (<-gotB).l // B's lock, already taken
		}
		released := time.Now()
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g := <-next.ch
		if g.l == nil {
			t.FailNow()
		}
		if d := g.at.Sub(released); d > 700*time.Millisecond {
			t.Errorf("handoff %d took %v: the grantee was not woken by its grant", i+1, d)
		}
		if i == 1 {
			g.l.Release(ctx)
		} else {
			gotB <- g
		}
	}
	// Let any stray message arrive, then look at what the key's channel carried.
	time.Sleep(50 * time.Millisecond)
	ps.Close()
	msgs := <-heard
	for _, m := range msgs {
		if strings.HasPrefix(m, "g:") {
			t.Errorf("a grant went to every subscriber of the key: %q", m)
		}
	}
	t.Logf("the key's channel carried %q", msgs)
}

// A semaphore's release wakes the queued waiter that the freed permit
// serves, on its own Client's channel: the permits key's channel, which
// every waiting process subscribes to, hears nothing.
func TestSemaphoreReleaseWakesOneClient(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := ctxFor(t, 30*time.Second)
	open := func() *core.Client {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := open(), open()
	permits := prefix + ":{s}:sem"
	held, err := a.Semaphore("s", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *core.Lock, 1)
	go func() {
		p, err := b.Semaphore("s", 1).Acquire(ctx, core.WithFair(), core.WithWaitTimeout(20*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitUntil(t, "the waiter queued", func() bool {
		info, err := a.Inspect(ctx, "s")
		return err == nil && info.PermitWaiters == 1
	})
	time.Sleep(100 * time.Millisecond) // its subscriptions flow

	ps := rdb.Subscribe(ctx, permits)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil {
		t.FailNow()
	}
	defer p.Release(ctx)
	select {
	case m := <-ps.Channel():
		t.Fatalf("the release was published on the permits key's channel (%q), which wakes a waiter in every process", m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}
