package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// heldObserver keeps the held count an Observer such as package otel
// keeps: +1 per successful, non-re-entered OpAcquire; -1 per
// non-re-entered OpRelease not already counted out by LeaseLost.
type heldObserver struct {
	held     atomic.Int64
	releases atomic.Int64
	mu       sync.Mutex
	log      []string
}

func (o *heldObserver) OpStart(ctx context.Context, op Op, key string, kind Kind) (context.Context, func(OpResult)) {
	return ctx, func(r OpResult) {
		switch {
		case op == OpAcquire && !r.Reentered && r.Err == nil:
			o.held.Add(1)
		case op == OpRelease && !r.Reentered && !r.Lost:
			o.held.Add(-1)
			o.releases.Add(1)
		}
		o.mu.Lock()
		o.log = append(o.log, op.String()+" "+key+" err="+errString(r.Err))
		o.mu.Unlock()
	}
}

func (o *heldObserver) LeaseLost(ctx context.Context, key string, kind Kind, fence int64, held time.Duration, cause error) {
	o.held.Add(-1)
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func reviewHandClient(t *testing.T, h *handHook, opts ...Option) (*Client, *miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	rdb.AddHook(h)
	c := mustNew(NewRedis(rdb, append([]Option{WithKeyPrefix("ho")}, opts...)...))
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	ctx := context.Background()
	for range 2 { // scripts loaded
		l, err := c.Lock(ctx, "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c, mr, rdb
}

// A waiter that gives up while a release is handing it the key: the
// releaser gives the handed lease back quietly. Through Client.release
// (as first built) the Observer saw an OpRelease of a lock whose
// OpAcquire failed, and the held count (package otel's
// latchkey.lock.held.count) ended at -1.
func TestReviewHandOverObserverHeldCount(t *testing.T) {
	h := &handHook{hold: make(chan struct{}), held: make(chan struct{})}
	obs := &heldObserver{}
	c, mr, _ := reviewHandClient(t, h, WithObserver(obs))
	handOverToALeaver(t, c, mr, h)
	time.Sleep(50 * time.Millisecond) // a background release's OpRelease end, if any
	if n := obs.held.Load(); n != 0 {
		obs.mu.Lock()
		t.Errorf("observer's held count %d after every lock was released, want 0; %d OpReleases for 1 lock acquired (+warm-up); log: %q", n, obs.releases.Load()-2, obs.log)
		obs.mu.Unlock()
	}
}

// Observe is "woken by releases" and reports "every change of leader — a
// new holder". A hand-over changes the holder without a release: it tells
// the observers' channel. Without that message (as first built) Observe
// saw the new holder only when the old holder's lease would have expired
// (its TTL at the last read), here 10 seconds late.
func TestReviewHandOverObserveNotWoken(t *testing.T) {
	h := &handHook{}
	c, _, _ := reviewHandClient(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := c.Lock(ctx, "k", WithTTL(10*time.Second), WithMetadata("a"))
	if err != nil {
		t.Fatal(err)
	}
	infos := c.Observe(ctx, "k")
	if i := <-infos; !i.Held || i.Metadata != "a" {
		t.Fatalf("first report %+v", i)
	}
	b := releasedToAWaiter(t, c, a, WithTTL(10*time.Second), WithMetadata("b"))
	defer b.Release(context.Background())
	if h.handOver.Load() != 1 {
		t.Logf("%d hand-overs", h.handOver.Load())
	}
	start := time.Now()
	select {
	case i := <-infos:
		t.Logf("Observe reported %+v after %v", i, time.Since(start))
	case <-time.After(2 * time.Second):
		t.Errorf("Observe did not report the new holder within 2s of the hand-over")
		select {
		case i := <-infos:
			t.Logf("Observe reported holder %q %v after the hand-over", i.Metadata, time.Since(start))
		case <-time.After(15 * time.Second):
			t.Log("nor within 17s")
		}
	}
}

// Close while a release hands the key to a waiter (WithAutoRenew(false)):
// the waiter returns ErrClosed, never holding, and the key is given back.
// As first built, the releaser gave it back through Client.release, which
// could find the lease closed by Close and delete nothing (Close keeps
// WithAutoRenew(false) leases): the key stayed held for the waiter's TTL
// by nobody, 6 trials of 40.
func TestReviewHandOverCloseLeaksNoRenewLease(t *testing.T) {
	leaks := 0
	const trials = 40
	for i := range trials {
		h := &handHook{hold: make(chan struct{}), held: make(chan struct{})}
		c, mr, _ := reviewHandClient(t, h)
		ctx := context.Background()
		a, err := c.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got := lockAsync(ctx, c, "k", WithTTL(time.Minute), WithAutoRenew(false))
		offering(t, c, "k")
		released := make(chan error, 1)
		go func() { released <- a.Release(ctx) }()
		<-h.held
		closed := make(chan struct{})
		go func() { _ = c.Close(); close(closed) }()
		r := <-got
		if !errors.Is(r.err, ErrClosed) {
			t.Fatalf("trial %d: waiter: %v %v", i, r.h, r.err)
		}
		close(h.hold)
		<-released
		<-closed
		time.Sleep(20 * time.Millisecond)
		if mr.Exists("ho:{k}") {
			leaks++
			if leaks == 1 {
				v, _ := mr.Get("ho:{k}")
				t.Logf("trial %d: after Close, key held by %q for %v more, and nobody holds it", i, v, mr.TTL("ho:{k}"))
			}
		}
	}
	if leaks > 0 {
		t.Errorf("%d of %d trials left the key held (TTL 1m) by a waiter that got ErrClosed", leaks, trials)
	}
}

// Stress on a real Redis: two Clients, many goroutines each, short waits
// that often end during a hand-over; mutual exclusion, rising fences, and
// nothing left held at the end.
func TestReviewHandOverStressRealRedis(t *testing.T) {
	rdb := redistest.Client(t)
	hh := &handHook{}
	rdb.AddHook(hh)
	defer func() { t.Logf("hand-over calls: %d", hh.handOver.Load()) }()
	prefix := redistest.Prefix(t, rdb)
	c1 := mustNew(NewRedis(rdb, WithKeyPrefix(prefix)))
	c2 := mustNew(NewRedis(rdb, WithKeyPrefix(prefix)))
	var inside atomic.Int64
	var lastFence atomic.Int64
	var overlaps, fenceDrops, acquired, timeouts, others atomic.Int64
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for i := range 16 {
		c := c1
		if i%4 == 3 {
			c = c2
		}
		wg.Go(func() {
			for time.Now().Before(stop) {
				wt := time.Duration(1+i%5) * time.Millisecond
				h, err := c.Lock(context.Background(), "k", WithWaitTimeout(wt), WithTTL(2*time.Second))
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						timeouts.Add(1)
					} else {
						others.Add(1)
						t.Logf("lock: %v", err)
					}
					continue
				}
				acquired.Add(1)
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				f := h.Fence()
				if prev := lastFence.Swap(f); prev >= f {
					fenceDrops.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
				if h.Err() != nil {
					t.Logf("lost: %v", h.Err())
				}
				inside.Add(-1)
				if err := h.Release(context.Background()); err != nil {
					t.Logf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("acquired %d, timeouts %d, other errors %d", acquired.Load(), timeouts.Load(), others.Load())
	if overlaps.Load() > 0 || fenceDrops.Load() > 0 {
		t.Errorf("overlaps %d, fence drops %d", overlaps.Load(), fenceDrops.Load())
	}
	time.Sleep(1500 * time.Millisecond) // background give-backs (bounded)
	if v, err := rdb.Get(context.Background(), prefix+":{k}").Result(); err == nil {
		ttl, _ := rdb.PTTL(context.Background(), prefix+":{k}").Result()
		t.Errorf("after every holder released, the key is still held by %q for %v", v, ttl)
	}
	_ = c1.Close()
	_ = c2.Close()
}

// failEarlyHook fails the first hand-over call before it is sent (a
// broken connection, a dial error): nothing ran on the server.
type failEarlyHook struct{ failed atomic.Bool }

func (h *failEarlyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failEarlyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isHandOver(cmd) && h.failed.CompareAndSwap(false, true) {
			cmd.SetErr(errors.New("test: dial tcp: connection refused"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}
func (h *failEarlyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A release whose call fails before it was sent leaves its lease to its
// TTL, as any failed release; its waiter, whose wait (5 s) outlasts that
// TTL (300 ms), goes on waiting (with a new token) and takes the key. As
// first built it failed at once with ErrUnavailable: a release's network
// error ended another goroutine's Lock.
func TestReviewHandOverUnsentFailureWaiterWaitsOn(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	h := &failEarlyHook{}
	rdb.AddHook(h)
	c := mustNew(NewRedis(rdb, WithKeyPrefix("ho")))
	defer c.Close()
	ctx := context.Background()
	for range 2 {
		l, _ := c.Lock(ctx, "warm")
		_ = l.Release(ctx)
	}
	a, err := c.Lock(ctx, "k", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, c, "k", WithWaitTimeout(5*time.Second))
	offering(t, c, "k")
	t.Logf("releaser: %v", a.Release(ctx))
	stop, ticked := make(chan struct{}), make(chan struct{})
	go func() { // miniredis's clock: let the releaser's lease expire
		defer close(ticked)
		for i := 0; i < 100; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			mr.FastForward(10 * time.Millisecond)
		}
	}()
	defer func() { close(stop); <-ticked }()
	r := <-got
	if r.err != nil {
		t.Errorf("waiter (wait 5s) of a key whose holder's 300ms lease expires: %v", r.err)
		return
	}
	_ = r.h.Release(ctx)
}

// Close in the middle of a hand-over chain: no deadlock, every caller
// returns, and (auto-renewed leases) nothing is left held.
func TestReviewHandOverCloseDuringChain(t *testing.T) {
	for trial := range 30 {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		hh := &handHook{}
		rdb.AddHook(hh)
		c := mustNew(NewRedis(rdb, WithKeyPrefix("ho")))
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				for {
					err := c.Do(context.Background(), "k", func(context.Context) error {
						time.Sleep(100 * time.Microsecond)
						return nil
					}, WithWaitTimeout(time.Second))
					if errors.Is(err, ErrClosed) {
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(20+trial) * time.Millisecond)
		closed := make(chan struct{})
		go func() { _ = c.Close(); close(closed) }()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("trial %d: callers still running 10s after Close", trial)
		}
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("trial %d: Close did not return", trial)
		}
		if mr.Exists("ho:{k}") {
			v, _ := mr.Get("ho:{k}")
			t.Errorf("trial %d: key left held by %q after Close (%d hand-overs)", trial, v, hh.handOver.Load())
		}
		_ = rdb.Close()
	}
}
