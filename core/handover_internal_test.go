package core

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// handHook counts the scripts a Client runs, and can hold a release that
// hands the key over (its call names 11 arguments) until open is closed,
// or fail it after it ran (an answer lost on the way back).
type handHook struct {
	scripts  atomic.Int64
	handOver atomic.Int64
	hold     chan struct{} // if not nil: a hand-over waits for it
	held     chan struct{} // closed when a hand-over is held
	failLate atomic.Bool
	once     sync.Once
}

func (h *handHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func isHandOver(cmd redis.Cmder) bool {
	a := cmd.Args()
	return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) == 3+7+11
}

func (h *handHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.scripts.Add(1)
		}
		if isHandOver(cmd) {
			h.handOver.Add(1)
			if h.hold != nil {
				h.once.Do(func() { close(h.held) })
				<-h.hold
			}
			err := next(ctx, cmd)
			if h.failLate.Load() && err == nil {
				cmd.SetErr(errors.New("test: the answer was lost"))
				return cmd.Err()
			}
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *handHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				h.scripts.Add(1)
			}
			if isHandOver(c) {
				h.handOver.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func handClient(t *testing.T, h *handHook) (*Client, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	rdb.AddHook(h)
	c := mustNew(NewRedis(rdb, WithKeyPrefix("ho")))
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	// The scripts loaded (EVALSHA, not NOSCRIPT and EVAL, from here on).
	ctx := context.Background()
	for range 2 {
		l, err := c.Lock(ctx, "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c, mr
}

// secondClient is another Client (another process) on mr, prefix "ho",
// closed when the test ends.
func secondClient(t *testing.T, mr *miniredis.Miniredis) *Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	c := mustNew(NewRedis(rdb, WithKeyPrefix("ho")))
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	return c
}

// offering waits until a waiter of c on key offers to be handed the key.
func offering(t *testing.T, c *Client, key string) *waiter {
	t.Helper()
	ch := c.kindNames(key, 0).lease
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c.nt.mu.Lock()
		if cs := c.nt.chans[ch]; cs != nil {
			for _, w := range cs.waiters {
				if w.offer != nil {
					c.nt.mu.Unlock()
					return w
				}
			}
		}
		c.nt.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no waiter offers to be handed the key")
	return nil
}

// releasedToAWaiter starts a Lock of c on "k" (opts), waits until it
// offers to be handed the key, releases a, and returns the waiter's lock.
func releasedToAWaiter(t *testing.T, c *Client, a *Lock, opts ...LockOption) *Lock {
	t.Helper()
	ctx := context.Background()
	got := lockAsync(ctx, c, "k", opts...)
	offering(t, c, "k")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.h
}

type lockResult struct {
	h   *Lock
	err error
}

func lockAsync(ctx context.Context, c *Client, key string, opts ...LockOption) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		h, err := c.Lock(ctx, key, opts...)
		ch <- lockResult{h, err}
	}()
	return ch
}

// A release hands the key to the Client's waiter in its own call: the
// waiter makes no attempt, holds the lease under its own token, with a
// fence above the releaser's, and a lease the server keeps for the
// waiter's TTL.
func TestHandOverGivesTheKeyToAWaiter(t *testing.T) {
	h := &handHook{}
	c, mr := handClient(t, h)
	ctx := context.Background()
	a, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, c, "k", WithTTL(7*time.Second), WithMetadata("b"))
	offering(t, c, "k")
	before := h.scripts.Load()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.h.Release(ctx)
	if n := h.scripts.Load() - before; n != 1 {
		t.Errorf("%d scripts from the release to the waiter's lock, want 1 (the release)", n)
	}
	if h.handOver.Load() != 1 {
		t.Errorf("%d hand-overs, want 1", h.handOver.Load())
	}
	if r.h.Fence() <= a.Fence() {
		t.Errorf("waiter's fence %d not above the releaser's %d", r.h.Fence(), a.Fence())
	}
	v, _ := mr.Get("ho:{k}")
	if v != r.h.Token()+"|b" {
		t.Errorf("lease value %q, want the waiter's %q", v, r.h.Token()+"|b")
	}
	if ttl := mr.TTL("ho:{k}"); ttl != 7*time.Second {
		t.Errorf("lease TTL %v, want the waiter's 7s", ttl)
	}
	if err := r.h.Err(); err != nil {
		t.Errorf("handed lock: %v", err)
	}
	if err := r.h.Release(ctx); err != nil {
		t.Errorf("release of the handed lock: %v", err)
	}
	if mr.Exists("ho:{k}") {
		t.Error("the handed lease outlived its release")
	}
}

// A waiter that gives up while a release is handing it the key is gone:
// the releaser gives back the lease it made for it, and the key is free
// again, not held until the waiter's TTL.
func TestHandOverToAWaiterThatLeft(t *testing.T) {
	h := &handHook{hold: make(chan struct{}), held: make(chan struct{})}
	c, mr := handClient(t, h)
	handOverToALeaver(t, c, mr, h)
	if _, err := c.TryLock(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
}

// handOverToALeaver releases a lock of c on "k" while a waiter of c
// offers, holds the hand-over (h) until the waiter has given up (its ctx
// cancelled), and waits until the key is free.
func handOverToALeaver(t *testing.T, c *Client, mr *miniredis.Miniredis, h *handHook) {
	t.Helper()
	ctx := context.Background()
	a, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
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
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for mr.Exists("ho:{k}") {
		if time.Now().After(deadline) {
			v, _ := mr.Get("ho:{k}")
			t.Fatalf("the lease handed to a waiter that left is still there: %q", v)
		}
		time.Sleep(time.Millisecond)
	}
}

// A hand-over whose answer is lost may have made the waiter's lease: the
// release fails with ErrUnavailable, the waiter's token is given back and
// the waiter goes on with a new one, and takes the key.
func TestHandOverAnswerLost(t *testing.T) {
	h := &handHook{}
	h.failLate.Store(true)
	c, mr := handClient(t, h)
	ctx := context.Background()
	a, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx, c, "k", WithTTL(time.Minute), WithWaitTimeout(10*time.Second))
	w := offering(t, c, "k")
	c.nt.mu.Lock()
	old := w.token
	c.nt.mu.Unlock()
	if err := a.Release(ctx); !errors.Is(err, ErrUnavailable) {
		t.Errorf("release whose answer was lost: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter of a hand-over whose answer was lost: %v", r.err)
	}
	defer r.h.Release(ctx)
	if r.h.Token() == old {
		t.Errorf("the waiter kept the token whose lease the lost hand-over may have made")
	}
	if v, _ := mr.Get("ho:{k}"); v != r.h.Token() {
		t.Errorf("lease value %q, want the waiter's new token %q", v, r.h.Token())
	}
}

// While waiters queue in W (another Client's starving or fair waiter), a
// release grants the key to the first of them: it is not handed to a
// waiter of the releasing Client, even one that came first.
func TestHandOverYieldsToTheQueue(t *testing.T) {
	h := &handHook{}
	c, mr := handClient(t, h)
	c2 := secondClient(t, mr)
	ctx := context.Background()
	a, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	local := lockAsync(ctx, c, "k")
	offering(t, c, "k")
	fair := lockAsync(ctx, c2, "k", WithFair())
	deadline := time.Now().Add(5 * time.Second)
	for !mr.Exists("ho:{k}:w") {
		if time.Now().After(deadline) {
			t.Fatal("the fair waiter did not queue")
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-fair
	if r.err != nil {
		t.Fatal(r.err)
	}
	select {
	case l := <-local:
		t.Fatalf("the Client's own waiter got the key before the queue's: %v", l.err)
	default:
	}
	if err := r.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-local
	if l.err != nil {
		t.Fatal(l.err)
	}
	_ = l.h.Release(ctx)
}

// Goroutines of two Clients contend for a few keys, giving up at random
// (some while a release is handing them the key): no two believe they hold
// a key at once, each key's fences strictly rise in the order the key was
// taken, hand-overs happen, and every key is free at the end.
func TestHandOverStress(t *testing.T) {
	h := &handHook{}
	c, mr := handClient(t, h)
	c2 := secondClient(t, mr)
	keys := []string{"s0", "s1"}
	var mu sync.Mutex
	inside := map[string]int{}
	last := map[string]int64{}
	var bad, took atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		cl := c
		if g%4 == 3 {
			cl = c2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				key := keys[(g+i)%len(keys)]
				wait := 200 * time.Millisecond
				if (g+i)%4 == 0 { // some give up soon, a hand-over to them under way or not
					wait = time.Duration(1+i%5) * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				l, err := cl.Lock(ctx, key, WithTTL(2*time.Second))
				cancel()
				if err != nil {
					continue
				}
				took.Add(1)
				mu.Lock()
				inside[key]++
				if inside[key] > 1 {
					bad.Add(1)
					t.Errorf("%s held twice at once", key)
				}
				if l.Fence() <= last[key] {
					bad.Add(1)
					t.Errorf("%s: fence %d after %d", key, l.Fence(), last[key])
				}
				last[key] = l.Fence()
				mu.Unlock()
				time.Sleep(time.Duration(1+i%3) * 500 * time.Microsecond)
				mu.Lock()
				inside[key]--
				mu.Unlock()
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if h.handOver.Load() == 0 {
		t.Error("no hand-over happened")
	}
	t.Logf("%d acquisitions, %d hand-overs", took.Load(), h.handOver.Load())
	for _, k := range keys {
		end := time.Now().Add(5 * time.Second)
		for mr.Exists("ho:{" + k + "}") {
			if time.Now().After(end) {
				v, _ := mr.Get("ho:{" + k + "}")
				t.Fatalf("%s still held at the end: %q", k, v)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// afterHook runs the func armed, once, on the goroutine of the first
// command that match selects after it was armed, once the server answered
// the command.
type afterHook struct {
	match func(redis.Cmder) bool
	armed atomic.Pointer[func()]
}

func (h *afterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.match(cmd) {
			if f := h.armed.Swap(nil); f != nil {
				(*f)()
			}
		}
		return err
	}
}
func (h *afterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// waitingAttempt matches a default-mode waiter's attempt (its script names
// 5 keys and 9 arguments).
func waitingAttempt(cmd redis.Cmder) bool {
	return cmd.Name() == "evalsha" && len(cmd.Args()) == 3+5+9
}

// lockReleasedAfterFirstAttempt has other take key, arms ah to release it
// right after c's next waiting attempt was answered, and returns c's Lock
// of key, its wait bounded by 2 s (a missed release costs a waiter
// seconds, or its 50 ms starvation threshold), with how long it took.
func lockReleasedAfterFirstAttempt(t *testing.T, ah *afterHook, c, other *Client, key string) (*Lock, time.Duration, error) {
	t.Helper()
	ctx := context.Background()
	b, err := other.Lock(ctx, key, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	after := func() { released <- b.Release(ctx) }
	ah.armed.Store(&after)
	start := time.Now()
	l, err := c.Lock(ctx, key, WithWaitTimeout(2*time.Second))
	took := time.Since(start)
	if rerr := <-released; rerr != nil {
		t.Fatal(rerr)
	}
	return l, took, err
}

// A waiter whose first attempt was made while the key's notifications
// were heard goes to sleep without a second attempt (nothing came since),
// yet misses no release: one that comes right after its first attempt,
// before it joined the Client's waiters, wakes it all the same (it is
// counted: quietSince). Without the count it would sleep for seconds.
func TestFirstAttemptHeardMissesNoRelease(t *testing.T) {
	defer SetStarvationThreshold(time.Minute)()
	h := &handHook{}
	c, mr := handClient(t, h)
	other := secondClient(t, mr)
	ctx := context.Background()

	// The key's channel heard, and kept (linger), by an earlier wait.
	a, err := other.Lock(ctx, "k", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first := lockAsync(ctx, c, "k")
	offering(t, c, "k")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Held by c: a waiter of c now sleeps after its first attempt.
	before := h.scripts.Load()
	second := lockAsync(ctx, c, "k", WithWaitTimeout(10*time.Second))
	offering(t, c, "k")
	if n := h.scripts.Load() - before; n != 1 {
		t.Errorf("%d attempts before the waiter slept, want 1", n)
	}
	if err := r.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := <-second
	if r2.err != nil {
		t.Fatal(r2.err)
	}

	// Now the release comes between the first attempt and the join, from
	// another Client: it must wake the waiter.
	ah := &afterHook{match: waitingAttempt}
	c.be.(*redisBackend).rdb.(*redis.Client).AddHook(ah)
	b, err := other.Lock(ctx, "k2", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// k2's channel heard by c before its waiter's first attempt.
	pre := lockAsync(ctx, c, "k2", WithWaitTimeout(10*time.Second))
	offering(t, c, "k2")
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-pre; r.err != nil {
		t.Fatal(r.err)
	} else if err := r.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, took, err := lockReleasedAfterFirstAttempt(t, ah, c, other, "k2")
	if err != nil {
		t.Fatalf("a release right after the first attempt was missed: %v after %v", err, took)
	}
	_ = l.Release(ctx)
	_ = r2.h.Release(ctx)
}

// slowAnswerHook holds back the answer of a hand-over (the release ran on
// the server; its reply reaches the caller delay later), and lets every
// other command through.
type slowAnswerHook struct {
	delay time.Duration
	sent  atomic.Int64 // when the hand-over was sent (UnixNano)
}

func (h *slowAnswerHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowAnswerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isHandOver(cmd) {
			return next(ctx, cmd)
		}
		h.sent.Store(time.Now().UnixNano())
		err := next(ctx, cmd)
		time.Sleep(h.delay)
		return err
	}
}
func (h *slowAnswerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A hand-over whose answer is slow to come back: the waiter's belief
// deadline is reckoned from when the release was sent, so it ends no
// later than the server's expiry of the lease the script made — not the
// answer's arrival plus the TTL, which would be the delay too late. On the
// shared Redis, whose TTLs run in real time.
func TestHandOverSlowAnswerDeadline(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := "lktest-ho-" + rand.Text()[:10]
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	const delay = 300 * time.Millisecond
	h := &slowAnswerHook{delay: delay}
	rdb.AddHook(h)
	c := mustNew(NewRedis(rdb, WithKeyPrefix(prefix)))
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	a, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	h2 := releasedToAWaiter(t, c, a, WithTTL(ttl), WithAutoRenew(false), WithWaitTimeout(10*time.Second))
	defer h2.Release(ctx)
	if h.sent.Load() == 0 {
		t.Fatal("the key was not handed over")
	}
	// The server's expiry is at least before+pttl (PTTL truncates to the
	// millisecond: one more).
	before := time.Now()
	pttl, err := rdb.PTTL(ctx, prefix+":{k}").Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL of the handed lease: %v, %v", pttl, err)
	}
	expiry := before.Add(pttl + time.Millisecond)
	h2.l.mu.Lock()
	deadline := h2.l.deadline
	h2.l.mu.Unlock()
	if deadline.After(expiry) {
		t.Errorf("the handed lock believes it holds until %v after the server's expiry (answer delayed %v)",
			deadline.Sub(expiry), delay)
	}
	if sent := time.Unix(0, h.sent.Load()); deadline.After(sent.Add(ttl)) {
		t.Errorf("belief deadline %v after send + TTL", deadline.Sub(sent.Add(ttl)))
	}
}
