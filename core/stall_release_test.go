package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// A release that waits in the Client's queue for Redis (every call it may
// have under way at once hangs on a stalled server) past its own 5 s must
// still reach the server, and its caller must learn what it did: dropped,
// the key stays held until its TTL and its waiters are not woken. From the
// review of the coalescer (its finding 1).
func TestStalledReleaseStillRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection, 7 s: make ci runs it")
	}
	srv := redistest.StartServer(t)
	// No read timeout shorter than the stall: the calls under way hang
	// through it, as with a long ReadTimeout or a network that drops. A
	// call's deadline bounds it (ContextTimeoutEnabled), so a release that
	// found a lane free would fail at its 5 s, before the stall ends.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("stall")))
	defer c.Close()
	bg := context.Background()
	l, err := c.TryLock(bg, "k", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	defer stallLanes(t, srv, c)()

	// The stall outlasts the release's 5 s in the queue, then ends.
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(6 * time.Second)
		srv.Resume(t)
	}()
	defer func() { <-resumed }()
	// A caller's context (a request's): Release detaches from its
	// cancellation and bounds its wait for the queue by 5 s.
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	start := time.Now()
	err = l.Release(ctx)
	took := time.Since(start)
	t.Logf("Release during the stall: %v after %v", err, took.Round(time.Millisecond))
	if took < 5*time.Second {
		t.Fatalf("Release returned after %v, before the queue's 5 s: the test proves nothing", took)
	}
	if err != nil {
		t.Fatalf("Release = %v after the stall ended, want nil: the release never reached Redis", err)
	}
	info, err := c.Inspect(bg, "k")
	if err != nil || info.Held {
		t.Fatalf("after Release returned nil the key is held (%v, err %v)", info.TTL, err)
	}
}

// A release that left the queue unsent and went out on its own must be
// over when Release returns, whatever it reports: a caller that takes its
// key again under the same token (a retried job, WithToken) afterwards
// must not have its new lease deleted under it by that release. From the
// review of the first fix, which sent the release from a goroutine after
// Release had returned.
func TestStalledReleaseOverWhenReleaseReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection, 11 s: make ci runs it")
	}
	srv := redistest.StartServer(t)
	g := &releaseGate{token: "job-7", open: make(chan struct{})}
	newClient := func(h redis.Hook) *core.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 30 * time.Second, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		if h != nil {
			rdb.AddHook(h)
		}
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("stall2")))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c, c2 := newClient(g), newClient(nil)
	bg := context.Background()
	opts := []core.LockOption{core.WithToken("job-7"), core.WithTTL(time.Minute)}
	l, err := c.TryLock(bg, "k", opts...)
	if err != nil {
		t.Fatal(err)
	}

	resume := stallLanes(t, srv, c)
	defer resume()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	g.armed.Store(true)
	start := time.Now()
	err = l.Release(ctx) // 5 s queued, then 5 s on its own: no answer
	t.Logf("Release during the stall: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if err == nil {
		t.Fatal("Release succeeded on a stalled server: the test proves nothing")
	}
	resume()

	l2, err := c.TryLock(bg, "k", opts...) // the job, retried under its token
	close(g.open)
	if err != nil {
		t.Fatalf("TryLock after the stall: %v", err)
	}
	defer l2.Release(bg)
	time.Sleep(300 * time.Millisecond) // a late release would land meanwhile
	keptOrTold(t, c2, "k", l2)
}

// keptOrTold fails unless another Client, c, cannot take key while l
// holds it — or, if it can, l was told (which still means a release of its
// token deleted its lease after Release returned).
func keptOrTold(t *testing.T, c *core.Client, key string, l *core.Lock) {
	t.Helper()
	keptOrToldBy(t, func(ctx context.Context) (*core.Lock, error) {
		return c.TryLock(ctx, key, core.WithTTL(time.Minute))
	}, key, l)
}

// keptOrToldBy is keptOrTold with the rival's attempt given: take.
func keptOrToldBy(t *testing.T, take func(context.Context) (*core.Lock, error), key string, l *core.Lock) {
	t.Helper()
	bg := context.Background()
	rival, err := take(bg)
	if errors.Is(err, core.ErrNotAcquired) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Release(bg)
	select {
	case <-l.Lost():
		t.Fatalf("the lease (fence %d) was deleted by a release of its token that Release had returned from; another Client took the key (fence %d)", l.Fence(), rival.Fence())
	default:
		t.Fatalf("another Client holds %s (fence %d) while the lease (fence %d) believes it holds and was never told", key, rival.Fence(), l.Fence())
	}
}

// releaseGate holds back, once armed, the first release of token sent as
// a single command (not in a pipeline) until open is closed, for 1 s at
// most: any delay between the decision to send it and its write (a
// goroutine's start, a wait for a pooled connection, a dial, a hook).
type releaseGate struct {
	token string
	armed atomic.Bool
	open  chan struct{}
}

func (g *releaseGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *releaseGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *releaseGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// EVALSHA/EVAL <script> 6 <keys...> <token> ...: release.lua's call
		if a := cmd.Args(); len(a) > 9 && fmt.Sprint(a[2]) == "6" && fmt.Sprint(a[9]) == g.token && g.armed.CompareAndSwap(true, false) {
			select {
			case <-g.open:
			case <-time.After(time.Second):
			}
		}
		return next(ctx, cmd)
	}
}

// stallLanes pauses srv and starts more acquisitions on c than c runs at
// once, each hanging on the paused server, so that c's next call queues.
// resume (idempotent) resumes srv and waits for them.
func stallLanes(t *testing.T, srv *redistest.Server, c *core.Client) (resume func()) {
	t.Helper()
	srv.Pause(t)
	var once sync.Once
	var wg sync.WaitGroup
	bg := context.Background()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.TryLock(bg, fmt.Sprint("busy", i), core.WithTTL(time.Minute))
			if err == nil {
				_ = h.Release(bg)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // they are under way, or queued
	return func() { once.Do(func() { srv.Resume(t); wg.Wait() }) }
}

// A caller batched with another caller's call that has no deadline is
// still bounded by its own: one goroutine's context.Background() must not
// make another's WithWaitTimeout wait for as long as Redis hangs; nor may
// that deadline fail the call without one. From the reviews of the
// coalescer.
func TestBatchedWaitBoundedBesideNoDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection, 2 s: make ci runs it")
	}
	srv := redistest.StartServer(t)
	// Only the calls' deadlines bound them: no read or write timeout, no
	// retries.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1, WriteTimeout: -1,
		ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix("bound")))
	defer c.Close()
	bg := context.Background()
	var wg sync.WaitGroup
	for i := range 6 { // connections open, scripts loaded
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := c.TryLock(bg, fmt.Sprint("warm", i)); err == nil {
				_ = l.Release(bg)
			}
		}()
	}
	wg.Wait()

	srv.Pause(t)
	paused := true
	resume := func() {
		if paused {
			srv.Resume(t)
			paused = false
		}
	}
	defer func() { resume(); wg.Wait() }()
	for i := range 3 { // calls bounded at 300 ms take the lanes
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
			defer cancel()
			_, _ = c.TryLock(ctx, fmt.Sprint("busy", i))
		}()
	}
	time.Sleep(50 * time.Millisecond)
	other := make(chan error, 1)
	go func() { // a background job's call, without a deadline, queues
		l, err := c.TryLock(bg, "other")
		if err == nil {
			err = l.Release(bg)
		}
		other <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(bg, "mine", core.WithWaitTimeout(time.Second))
		if err == nil {
			_ = l.Release(bg)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Lock got the key from a paused server")
		}
		t.Logf("Lock with WithWaitTimeout(1s) returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		resume()
		err := <-done
		t.Fatalf("Lock with WithWaitTimeout(1s) still waited after 5 s, batched with a call without a deadline (it returned once Redis resumed, after %v: %v)",
			time.Since(start).Round(time.Millisecond), err)
	}
	// Nor does the other caller's deadline bound the call without one: it
	// waits for Redis, and succeeds once it is back.
	resume()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("the call without a deadline, batched with one whose deadline passed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call without a deadline still waits 10 s after Redis resumed")
	}
}
