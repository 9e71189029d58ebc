package etcdlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseName is the name the Client gives key's lease (the default prefix).
func leaseName(key string) string { return "latchkey:{" + key + "}" }

// Three processes (a Client each, on a connection of its own) queue in
// turn behind a fourth: they get the key in the order they queued —
// whatever their tokens, which sort the other way — each with a higher
// fence. Inspect counts them and the age of the first; Scan lists the
// lease, never a queue entry; nothing is left in etcd once the queue
// drained.
func TestFairOrderAcrossProcesses(t *testing.T) {
	ep := startEtcd(t)
	ctx := ctxT(t)
	cli := newCli(t, ep)
	holder := newClient(t, cli)
	const key = "fifo"
	h, err := holder.TryLock(ctx, key, core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tokens := []string{"tok-c", "tok-b", "tok-a"} // key order is the reverse of arrival
	var mu sync.Mutex
	var order []int
	var fences []int64
	var wg sync.WaitGroup
	for i, tok := range tokens {
		c := newClient(t, newCli(t, ep))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, key, core.WithFair(), core.WithToken(tok), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order, fences = append(order, i), append(fences, l.Fence())
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		}()
		locktest.WaitWaiters(t, holder, key, i+1)
	}
	time.Sleep(50 * time.Millisecond)
	info, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Waiters != 3 || info.OldestWait < 50*time.Millisecond || info.OldestWait > 20*time.Second {
		t.Fatalf("Inspect while queued: %+v", info)
	}
	var listed []string
	for info, err := range holder.Scan(ctx, "*") {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, info.Key)
	}
	if !slices.Equal(listed, []string{key}) {
		t.Fatalf("Scan listed %q, want only the lease", listed)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2}) {
		t.Fatalf("acquisition order %v, want arrival order [0 1 2]", order)
	}
	if !slices.IsSorted(fences) || fences[0] <= h.Fence() {
		t.Fatalf("fences %v after %d", fences, h.Fence())
	}
	info, err = holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held || info.Waiters != 0 {
		t.Fatalf("after the queue drained: %+v", info)
	}
	left, err := cli.Get(ctx, etcdlock.QueuePrefix(leaseName(key)), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if left.Count != 0 {
		t.Fatalf("%d queue entries left in etcd", left.Count)
	}
}

// A queued waiter whose process dies — its etcd connection closed
// abruptly, so it never leaves the queue — holds the key up for no longer
// than its entry's TTL (3 s, renewed while it waited): the waiter behind
// it gets the key within that of the release.
func TestFairDeadWaiter(t *testing.T) {
	ep := startEtcd(t)
	ctx := ctxT(t)
	holder := newClient(t, newCli(t, ep))
	const key = "dead-waiter"
	h, err := holder.TryLock(ctx, key, core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	deadCli := newCli(t, ep)
	dead := newClient(t, deadCli)
	deadDone := make(chan error, 1)
	go func() {
		l, err := dead.Lock(ctx, key, core.WithFair(), core.WithWaitTimeout(20*time.Second))
		if l != nil {
			t.Error("the dead waiter got the key")
		}
		deadDone <- err
	}()
	locktest.WaitWaiters(t, holder, key, 1)
	next := newClient(t, newCli(t, ep))
	got := make(chan time.Time, 1)
	go func() {
		l, err := next.Lock(ctx, key, core.WithFair(), core.WithWaitTimeout(20*time.Second))
		if err != nil {
			t.Errorf("the next waiter: %v", err)
			close(got)
			return
		}
		at := time.Now()
		l.Release(context.Background()) // before the test ends and its Client closes
		got <- at
	}()
	locktest.WaitWaiters(t, holder, key, 2)
	deadCli.Close() // dies: no release of its entry, no renewal
	if err := <-deadDone; err == nil {
		t.Fatal("the dead waiter's Lock ended without an error")
	}
	released := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at, ok := <-got
	if !ok {
		t.FailNow()
	}
	// Its entry expires 3 s after its last renewal, before the release;
	// etcd deletes the keys of an expired lease within half a second.
	wait := at.Sub(released)
	t.Logf("the next waiter got the key %v after the release", wait)
	if wait > 4*time.Second {
		t.Fatalf("the next waiter got the key %v after the release", wait)
	}
}

// recorder collects what a subscription delivers.
type recorder struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 100)} }

func (r *recorder) deliver(token string) {
	r.mu.Lock()
	r.got = append(r.got, token)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// expect waits up to 3 s for the deliveries want, then 300 ms more to see
// that nothing else comes.
func (r *recorder) expect(t *testing.T, who string, want ...string) {
	t.Helper()
	r.expectWithin(t, 3*time.Second, who, want...)
}

// expectWithin is expect waiting up to d.
func (r *recorder) expectWithin(t *testing.T, d time.Duration, who string, want ...string) {
	t.Helper()
	deadline := time.After(d)
	for len(r.all()) < len(want) {
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("%s: delivered %q, want %q", who, r.all(), want)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if got := r.all(); !slices.Equal(got, want) {
		t.Fatalf("%s: delivered %q, want %q", who, got, want)
	}
}

// proc is one process's backend, driven as core drives it.
type proc struct {
	b   etcdlock.Backend
	rec *recorder
	tok string
}

func newProc(t *testing.T, ep, tok string) *proc {
	t.Helper()
	b := etcdlock.NewBackend(newCli(t, ep))
	t.Cleanup(func() { b.Close() })
	return &proc{b: b, rec: newRecorder(), tok: tok}
}

func (p *proc) acquire(t *testing.T, key string, enqueue bool) core.AcquireResult {
	t.Helper()
	r, err := p.b.Acquire(ctxT(t), core.AcquireRequest{Key: key, Token: p.tok, TTL: time.Minute, Fair: true, Enqueue: enqueue})
	if err != nil {
		t.Fatalf("%s: Acquire: %v", p.tok, err)
	}
	return r
}

// settle lets the watches read their targets after the queue changed.
func settle() { time.Sleep(300 * time.Millisecond) }

// A release wakes one waiter in all the processes: the head's, with its
// token. The processes of the waiters behind it hear nothing — a second
// release, the same. (Each process is a backend of its own, on a
// connection of its own, subscribed as core subscribes when a waiter
// waits; deliveries are what core turns into wake-ups.)
func TestReleaseWakesOneProcess(t *testing.T) {
	ep := startEtcd(t)
	key := leaseName("one-wake")
	holder := newProc(t, ep, "holder")
	if r := holder.acquire(t, key, true); !r.Acquired {
		t.Fatalf("holder: %+v", r)
	}
	ws := []*proc{newProc(t, ep, "w0"), newProc(t, ep, "w1"), newProc(t, ep, "w2")}
	for _, w := range ws {
		if r := w.acquire(t, key, true); r.Acquired || !r.Queued {
			t.Fatalf("%s: %+v, want queued", w.tok, r)
		}
		if err := w.b.Subscribe(ctxT(t), key, w.rec.deliver); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	if ok, err := holder.b.Release(ctxT(t), key, holder.tok); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	ws[0].rec.expect(t, "w0", "w0")
	ws[1].rec.expect(t, "w1")
	ws[2].rec.expect(t, "w2")
	if r := ws[1].acquire(t, key, true); r.Acquired || !r.Queued {
		t.Fatalf("w1 jumped the queue: %+v", r)
	}
	if r := ws[0].acquire(t, key, true); !r.Acquired {
		t.Fatalf("w0, head of the queue, on a free key: %+v", r)
	}
	ws[0].b.Unsubscribe(key) // it waits no more (core unsubscribes an idle key)
	settle()
	if ok, err := ws[0].b.Release(ctxT(t), key, ws[0].tok); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	ws[1].rec.expect(t, "w1", "w1")
	ws[2].rec.expect(t, "w2")
}

// The head of the queue, woken by a release, gives up instead of taking
// the key (Release of its token): the key is not stranded — it stays
// free, nobody holds it for the quitter, and the waiter behind it is told
// at once (its process watched the quitter's entry) and takes it.
func TestFairHeadGivesUp(t *testing.T) {
	ep := startEtcd(t)
	key := leaseName("give-up")
	holder := newProc(t, ep, "holder")
	if r := holder.acquire(t, key, true); !r.Acquired {
		t.Fatalf("holder: %+v", r)
	}
	quitter, next := newProc(t, ep, "quitter"), newProc(t, ep, "next")
	for _, w := range []*proc{quitter, next} {
		if r := w.acquire(t, key, true); !r.Queued {
			t.Fatalf("%s: %+v, want queued", w.tok, r)
		}
		if err := w.b.Subscribe(ctxT(t), key, w.rec.deliver); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	if ok, err := holder.b.Release(ctxT(t), key, holder.tok); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	quitter.rec.expect(t, "quitter", "quitter")
	if ok, err := quitter.b.Release(ctxT(t), key, quitter.tok); ok || err != nil {
		t.Fatalf("the quitter's release: %v %v, want false (it held nothing)", ok, err)
	}
	// Within a second: before the quitter's entry (renewed by nobody since
	// it queued) could expire.
	next.rec.expectWithin(t, time.Second, "next", "next")
	info, err := next.b.Inspect(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held || info.Waiters != 1 {
		t.Fatalf("after the head gave up: %+v", info)
	}
	r := next.acquire(t, key, true)
	if !r.Acquired || r.Fence <= 0 {
		t.Fatalf("next: %+v", r)
	}
	// The quitter is gone: asking again without queueing, it is refused.
	if r := quitter.acquire(t, key, false); r.Acquired || r.Queued {
		t.Fatalf("quitter after giving up: %+v", r)
	}
	if ok, err := next.b.Release(ctxT(t), key, next.tok); !ok || err != nil {
		t.Fatalf("next's release: %v %v", ok, err)
	}
}

// A holder's lease that expires wakes the head of the queue as a release
// does (etcd deletes the key; the head's process watches it), and only it.
func TestExpiryWakesHead(t *testing.T) {
	ep := startEtcd(t)
	key := leaseName("expiry-head")
	holder := newProc(t, ep, "holder")
	r, err := holder.b.Acquire(ctxT(t), core.AcquireRequest{Key: key, Token: holder.tok, TTL: time.Second})
	if err != nil || !r.Acquired {
		t.Fatalf("holder: %+v %v", r, err)
	}
	head, second := newProc(t, ep, "head"), newProc(t, ep, "second")
	for _, w := range []*proc{head, second} {
		if r := w.acquire(t, key, true); !r.Queued {
			t.Fatalf("%s: %+v, want queued", w.tok, r)
		}
		if err := w.b.Subscribe(ctxT(t), key, w.rec.deliver); err != nil {
			t.Fatal(err)
		}
	}
	head.rec.expect(t, "head", "head") // within 3 s: the lease is 1 s
	second.rec.expect(t, "second")
	if r := head.acquire(t, key, true); !r.Acquired || r.Fence <= 0 {
		t.Fatalf("head after the expiry: %+v", r)
	}
}
