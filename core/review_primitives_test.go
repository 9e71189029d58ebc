package core_test

// Regression tests from the adversarial review of the primitives
// (semaphore, read-write lock, election, groups). Each fails until the bug
// it names is fixed; the comment on each says what goes wrong and how.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestReviewObserveReportsUnclaimedGrant: a release hands the key to the
// first fair waiter as a grant — the lease set to the waiter's bare token
// for fairClaim — which the waiter then claims, writing its value (the
// announcement) over it. Observe reads the grant as a new leader with an
// empty announcement; when the waiter claims it, the token is the same, so
// Observe reports nothing more: the new leader's announcement is never
// observed. (A grant its waiter gave up on is likewise reported as a
// leader that never led.) The belief checker met this without WithFair:
// Lock's waiters queue once they have waited starvationThreshold. Here
// the claim is held back 300 ms, as a slow network would, so that
// Observe's read falls between the grant and the claim.
func TestReviewObserveReportsUnclaimedGrant(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	slow := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { slow.Close() })
	kf := newKeyFault(t, slow)
	a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer a.Close()
	b := mustNew(core.NewRedis(slow, core.WithKeyPrefix(prefix)))
	defer b.Close()
	o := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer o.Close()
	ctx := ctxFor(t, 20*time.Second)

	lead, err := a.Campaign(ctx, "seat", "10.0.0.1:80", core.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var reports []core.Info
	infos := o.Observe(octx, "seat")
	go func() {
		for info := range infos {
			mu.Lock()
			reports = append(reports, info)
			mu.Unlock()
		}
	}()
	got := make(chan *core.Lock, 1)
	go func() {
		l, err := b.Campaign(ctx, "seat", "10.0.0.2:80", core.WithTTL(5*time.Second), core.WithFair(), core.WithWaitTimeout(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, err := a.Inspect(ctx, "seat"); err == nil && info.Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never queued")
		}
	}
	kf.add(&faultRule{key: prefix + ":{seat}", delay: 300 * time.Millisecond, onWire: true, times: 1})
	if err := lead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bl := <-got
	if bl == nil {
		return
	}
	defer bl.Release(ctx)
	time.Sleep(500 * time.Millisecond) // the announcement, and Observe's read after it
	info, err := o.Inspect(ctx, "seat")
	if err != nil || info.Token != bl.Token() || info.Metadata != "10.0.0.2:80" {
		t.Fatalf("Inspect after the claim: %+v, %v", info, err)
	}
	mu.Lock()
	defer mu.Unlock()
	last := reports[len(reports)-1]
	for _, r := range reports {
		if r.Held && r.Metadata == "" {
			t.Errorf("Observe reported a leader without its announcement: token %s fence %d ttl %v", r.Token, r.Fence, r.TTL)
		}
	}
	if last.Token != bl.Token() || last.Metadata != "10.0.0.2:80" {
		t.Errorf("Observe's last report: leader %q announced %q; the leader is %q, announcing %q",
			last.Token, last.Metadata, bl.Token(), "10.0.0.2:80")
	}
}

// TestReviewObserveSlowReceiverGetsStaleLeader: Observe's doc says "a slow
// receiver delays the next report, which then tells the state of that
// moment". The report waiting for a slow receiver is the state read
// before it started waiting: a receiver that comes back after the leader
// resigned and another took over is told the resigned one leads (etcd's
// Observe has the same shape). The pending report should be read again
// on every wake-up while it waits.
func TestReviewObserveSlowReceiverGetsStaleLeader(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer a.Close()
	o := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer o.Close()
	ctx := ctxFor(t, 20*time.Second)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	infos := o.Observe(octx, "seat")
	if info := <-infos; info.Held {
		t.Fatalf("a leader before any campaign: %+v", info)
	}
	one, err := a.Campaign(ctx, "seat", "one")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // Observe read "one" and waits for the receiver
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	two, err := a.Campaign(ctx, "seat", "two")
	if err != nil {
		t.Fatal(err)
	}
	defer two.Release(ctx)
	time.Sleep(200 * time.Millisecond)
	info := <-infos // the receiver comes back
	if info.Token != two.Token() {
		t.Errorf("the slow receiver was told %q (%q) leads, which resigned 200 ms before; %q (%q) leads",
			info.Metadata, info.Token, "two", two.Token())
	}
}

// TestReviewRWReadersAfterWriterWokenTogether (the failure mode of
// Redisson #1542): readers of one Client that wait behind a writer are let
// in one at a time. The writer's release publishes one notification, which
// wakes one waiter per Client; that reader gets in, and its success wakes
// nobody, so the other readers sleep until their fallback timer — the
// writer's remaining TTL as they last saw it, up to about five seconds —
// although nothing keeps them out. A Client is meant to be shared by a
// process's goroutines, so this is the common case. A write hold's
// release (or a reader's admission) should wake every reader waiting in
// the Client.
func TestReviewRWReadersAfterWriterWokenTogether(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	w := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer w.Close()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	wl, err := w.RWMutex("doc").Lock(ctx) // the default TTL, 30 s
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held []*core.Lock
	var failed []error
	for range 3 {
		wg.Go(func() {
			r, err := c.RWMutex("doc").RLock(ctx, core.WithWaitTimeout(2*time.Second))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, err)
				return
			}
			held = append(held, r)
		})
	}
	time.Sleep(300 * time.Millisecond) // the readers wait behind the writer
	if err := wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, r := range held {
		r.Release(ctx)
	}
	if len(failed) > 0 {
		t.Errorf("%d of 3 readers did not get in within 1.7 s of the writer's release, with nothing keeping them out: %v",
			len(failed), failed[0])
	}
}

// TestReviewRWReaderWokenWhenWaitingWriterGivesUp: a reader refused
// because a writer waits sleeps its full fallback (about five seconds:
// the refusal carries no TTL), and a writer that gives up leaves the
// waiting writers without a notification. The doc promises that "a
// writer that gives up stops holding readers back within those seconds"
// (the three of a waiting writer's entry); the reader is kept out 4–5 s
// after the writer left. rw_unlock could publish when it removes a
// waiting writer, as a release does.
func TestReviewRWReaderWokenWhenWaitingWriterGivesUp(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	var cs []*core.Client
	for range 3 {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		cs = append(cs, c)
	}
	ctx := ctxFor(t, 20*time.Second)
	r1, err := cs[0].RWMutex("cfg").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	gaveUp := make(chan time.Time, 1)
	go func() {
		_, err := cs[1].RWMutex("cfg").Lock(ctx, core.WithWaitTimeout(300*time.Millisecond))
		if err == nil {
			t.Error("the writer got in beside a reader")
		}
		gaveUp <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond) // the writer waits, and holds new readers back
	r2, err := cs[2].RWMutex("cfg").RLock(ctx, core.WithWaitTimeout(10*time.Second))
	in := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release(ctx)
	if kept := in.Sub(<-gaveUp); kept > 3*time.Second {
		t.Errorf("the reader got in %v after the waiting writer gave up", kept.Round(time.Millisecond))
	}
}

// TestReviewRWReaderFenceBelowWriters: a read hold carries the fence
// counter's value, or 0 when there is no counter — after a Redis restart
// that lost the data, and in normal running once fenceRetention (5 min)
// has passed since the counter was seeded (it is never refreshed). A
// reader then holds fence 0, below the writers before it; the memory
// backend keeps its counters and gives the writer's fence. Storage that
// checks fences rejects such a reader's writes, and Inspect shows a write
// hold with fence 0 the same way. rw_rlock (and inspect_holds) could seed
// a missing counter with next_fence, as rw_lock does.
func TestReviewRWReaderFenceBelowWriters(t *testing.T) {
	check := func(t *testing.T, c *core.Client, lose func()) {
		ctx := ctxFor(t, 20*time.Second)
		w, err := c.RWMutex("k").Lock(ctx, core.WithTTL(time.Hour), core.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lose()
		r, err := c.RWMutex("k").RLock(ctx, core.WithTTL(time.Hour), core.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
		if r.Fence() < w.Fence() {
			t.Errorf("a read hold taken after write fence %d carries fence %d", w.Fence(), r.Fence())
		}
	}
	t.Run("counter retention", func(t *testing.T) {
		mr, rdb := redistest.Miniredis(t, false)
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("rwf")))
		defer c.Close()
		check(t, c, func() { mr.FastForward(6 * time.Minute) })
	})
	t.Run("restart", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := mustNew(core.NewRedis(srv.Client(t), core.WithKeyPrefix("rwf")))
		defer c.Close()
		check(t, c, func() { srv.Restart(t) })
	})
}

// TestReviewRWDeposedWriterSharesReadersFence: a writer that paused past
// its TTL is deposed by readers, and the readers carry its very fence (a
// read hold does not raise it). The RWMutex doc says storage that checks
// fences "rejects a deposed writer's" writes: it cannot — the deposed
// writer's fence equals the current term's, and its late writes land
// while the readers read. A reader admitted after a write hold (the first
// of a read term) could raise the fence, which the term's later readers
// share.
func TestReviewRWDeposedWriterSharesReadersFence(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	w, err := c.RWMutex("k").Lock(ctx, core.WithTTL(300*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	<-w.Lost() // the writer paused past its TTL
	r, err := c.RWMutex("k").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	if r.Fence() <= w.Fence() {
		t.Errorf("the readers that deposed write fence %d hold fence %d: a store checking fences accepts the deposed writer's late writes",
			w.Fence(), r.Fence())
	}
}
