package core_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// shaCounter counts the scripts a go-redis client runs, by SHA1.
type shaCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *shaCounter) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if strings.ToLower(c.Name()) == "evalsha" && len(c.Args()) > 1 {
			sha, _ := c.Args()[1].(string)
			h.n[sha]++
		}
	}
}

func (h *shaCounter) take() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = map[string]int{}
	return n
}

// touchesAndAttempts takes the counts: the touch scripts, and every other
// script (attempts: acquisitions, joins, claims).
func (h *shaCounter) touchesAndAttempts() (touches, attempts int) {
	for sha, n := range h.take() {
		if sha == core.QueueTouchHash {
			touches += n
		} else {
			attempts += n
		}
	}
	return touches, attempts
}

func (h *shaCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *shaCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *shaCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// touchedWaiter returns a context of 30 s, the shared Redis, a prefix of
// the test's own, and two Clients on them, closed when the test ends: a,
// to hold, and w, to wait, whose go-redis client counts its scripts in
// hook.
func touchedWaiter(t *testing.T) (context.Context, redis.UniversalClient, string, *core.Client, *core.Client, *shaCounter) {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := ctxFor(t, 30*time.Second)
	a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { a.Close() })
	wrdb := redistest.Client(t)
	hook := &shaCounter{n: map[string]int{}}
	wrdb.AddHook(hook)
	w := mustNew(core.NewRedis(wrdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { w.Close() })
	return ctx, rdb, prefix, a, w, hook
}

// hearGrants has w wait once, for a key "warm" that a holds for 200 ms,
// so that w's grant channel is heard before the test's own wait: a join
// then names the channel, and the waiter does not attempt again at once
// (it would when it joined before the channel was heard, and on a loaded
// machine that attempt may come after the test began to count).
func hearGrants(ctx context.Context, t *testing.T, a, w *core.Client) {
	t.Helper()
	warm, err := a.TryLock(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(200 * time.Millisecond); warm.Release(ctx) }()
	l, err := w.Lock(ctx, "warm", core.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
}

// queueBehindHolder has a take "k" (fair, TTL a minute, not renewed), runs
// then (if given) on the held key, and queues a fair waiter of w behind
// it, given up when the test ends. w's grant channel is heard before it
// joins (hearGrants), so what w sends after this returns is its touches.
func queueBehindHolder(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix string, a, w *core.Client, then func()) {
	t.Helper()
	hearGrants(ctx, t, a, w)
	if _, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute), core.WithAutoRenew(false)); err != nil {
		t.Fatal(err)
	}
	if then != nil {
		then()
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go w.Lock(wctx, "k", core.WithFair(), core.WithWaitTimeout(20*time.Second))
	waitQueueLen(ctx, t, rdb, prefix, "k", 1)
}

// A queued waiter that hears nothing keeps its place with the short touch
// script, not a full attempt, for longer than a queue entry lives (here
// touches every second, entries of 3 s);
// and a grant whose message was lost is found by the next touch, which
// sends the waiter to claim it.
func TestQueuedWaiterTouches(t *testing.T) {
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	ctx, rdb, prefix, a, w, hook := touchedWaiter(t)

	if _, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := fairLockAsync(ctx, t, w, "k")
	lease, wq := prefix+":{k}", prefix+":{k}:w"
	time.Sleep(3500 * time.Millisecond)
	touches, attempts := hook.touchesAndAttempts()
	t.Logf("in 3.5 s: %d touches, %d attempts", touches, attempts)
	if touches < 2 || attempts > 2 {
		t.Errorf("in 3.5 s the waiter touched %d times and attempted %d times; want ≥ 2 touches and ≤ 2 attempts (the first try and the join)", touches, attempts)
	}
	members, err := rdb.ZRange(ctx, wq, 0, 0).Result()
	if err != nil || len(members) == 0 {
		t.Fatalf("the waiter lost its place in the queue: %v", err)
	}
	tok, _, _ := strings.Cut(members[0], "|")
	// A grant whose message never came: the key handed to the waiter,
	// silently.
	rdb.ZRem(ctx, wq, members[0])
	rdb.Set(ctx, lease, tok+"|", 5*time.Second)
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if l.Token() != tok {
			t.Fatalf("acquired with token %q, queued as %q", l.Token(), tok)
		}
		l.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter never found the grant its message did not announce")
	}
}

// A release that grants the key to the queue's head tells the waiter
// behind it that it is next: when the head is dead and never claims, that
// waiter takes the key once the grant's claim window (1 s) has passed —
// not at its next touch, which comes only every 10 s.
func TestNextInLineAfterDeadHead(t *testing.T) {
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 30*time.Second)

	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A queued waiter that died: its entry lives 20 s more.
	queueDeadWaiter(ctx, t, rdb, prefix, "k", 20*time.Second)

	got := fairLockAsync(ctx, t, w, "k")
	waitQueueLen(ctx, t, rdb, prefix, "k", 2)
	time.Sleep(100 * time.Millisecond) // its subscriptions flow
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lockedBetween(ctx, t, got, released, 900*time.Millisecond, 5*time.Second,
		"the waiter behind a dead head (its touch comes every 10 s: within 5 s only if told it is next)")
}

// A lease without expiry (an operator's PERSIST, a key set by hand) gives a
// queued waiter no expiry to time its touch to: it touches at its usual
// pace, not in a tight loop.
func TestTouchPaceWithoutHolderExpiry(t *testing.T) {
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	ctx, rdb, prefix, a, w, hook := touchedWaiter(t)

	queueBehindHolder(ctx, t, rdb, prefix, a, w, func() {
		if err := rdb.Persist(ctx, prefix+":{k}").Err(); err != nil {
			t.Fatal(err)
		}
	})
	hook.take()
	time.Sleep(2 * time.Second)
	n := 0
	for _, c := range hook.take() {
		n += c
	}
	if n > 6 {
		t.Errorf("%d scripts in 2 s from one queued waiter (touches every second): a tight loop", n)
	}
}

// A key granted to another waiter that has not claimed it yet has only a
// short claim window left, but that is no time for the other queued
// waiters to touch again: the first in line was told it is next, and looks
// if the grant lapses. Here grants to someone else follow one another for
// 6 s (each with a claim window of 300 ms); the waiter keeps its usual pace
// of one touch in 3 s instead of one per claim window (about 11 before).
//
// The grants must follow one another without a gap: a key that lapsed
// between two is free, and a waiter that finds it so attempts, as it
// should. When the machine stalls this loop for as long as a claim window,
// the run tells nothing, and the scenario runs again on a fresh prefix (up
// to 3 times in all).
func TestTouchPaceWhileGranted(t *testing.T) {
	defer core.SetTouchTimings(3*time.Second, 9*time.Second)()
	const window = 300 * time.Millisecond
	for try := 1; ; try++ {
		ctx, rdb, prefix, a, w, hook := touchedWaiter(t)
		queueBehindHolder(ctx, t, rdb, prefix, a, w, nil)
		hook.take()
		lease := prefix + ":{k}"
		end := time.Now().Add(6 * time.Second)
		var stall time.Duration
		// A grant set by a SET sent at prev lives until at least
		// prev+window; the next one is in place by the time its SET
		// answers.
		prev := time.Now()
		for time.Now().Before(end) {
			sent := time.Now()
			if err := rdb.Set(ctx, lease, "someone|", window).Err(); err != nil {
				t.Fatal(err)
			}
			stall = max(stall, time.Since(prev))
			prev = sent
			time.Sleep(100 * time.Millisecond)
		}
		touches, attempts := hook.touchesAndAttempts()
		t.Logf("try %d: in 6 s of grants to another waiter: %d touches, %d attempts (grants %v apart at most)", try, touches, attempts, stall)
		if stall >= window-20*time.Millisecond && try < 3 {
			continue // the key may have lapsed between two grants
		}
		if touches > 3 || attempts > 0 {
			t.Errorf("in 6 s the waiter touched %d times and attempted %d times while the key was granted to another; want ≤ 3 touches (one per 3 s) and no attempt", touches, attempts)
		}
		return
	}
}

// A waiter of the default mode that joins the queue while the key is
// granted to an earlier waiter (not claimed yet) does not time its next
// look to the grant's claim window either: it hears nothing for its usual
// pace (5 s less a fifth at most here, past the 2.5 s watched), where
// before it touched once the window had passed.
func TestJoinWhileGrantedKeepsPace(t *testing.T) {
	defer core.SetTouchTimings(5*time.Second, 15*time.Second)() // its first touch ≥ 4 s after joining
	ctx, rdb, prefix, a, w, hook := touchedWaiter(t)

	hearGrants(ctx, t, a, w)

	lease := prefix + ":{k}"
	queueDeadWaiter(ctx, t, rdb, prefix, "k", 20*time.Second) // someone queues ahead
	grant := func() {
		if err := rdb.Set(ctx, lease, "someone|", 300*time.Millisecond).Err(); err != nil {
			t.Error(err)
		}
	}
	grant()
	hook.take()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.Lock(wctx, "k", core.WithWaitTimeout(20*time.Second))
	end := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(end) {
		time.Sleep(100 * time.Millisecond)
		grant()
	}
	touches, attempts := hook.touchesAndAttempts()
	t.Logf("in 2.5 s after joining behind a grant: %d touches, %d attempts", touches, attempts)
	if touches > 0 || attempts != 1 {
		t.Errorf("in 2.5 s after joining behind a grant the waiter touched %d times and attempted %d times; want its join alone", touches, attempts)
	}
}

// The cost the touch pace accepts (see TestTouchPaceWhileGranted): when
// the waiter granted the key and the one told it is next are both dead,
// nobody is told to look when their grants lapse, and the waiters behind
// them find the key at their touch pace. Here two dead waiters queue ahead
// of a live one that touches every 2 s: it gets the key within the two
// claim windows and its pace, where without its touches it would wait for
// the dead entries to lapse (20 s).
func TestTwoDeadAheadFoundAtTouchPace(t *testing.T) {
	const pace = 2 * time.Second
	defer core.SetTouchTimings(pace, 3*pace)()
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 30*time.Second)

	holder := heldWithDeadQueued(ctx, t, rdb, prefix, a, 20*time.Second, "dead1", "dead2")
	got := fairLockAsync(ctx, t, w, "k")
	waitQueueLen(ctx, t, rdb, prefix, "k", 3)
	time.Sleep(100 * time.Millisecond) // its subscriptions flow
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Two claim windows (≤ 1 s each), then one touch, with a margin for a
	// busy machine.
	lockedBetween(ctx, t, got, released, 900*time.Millisecond, 2*time.Second+pace+3*time.Second,
		fmt.Sprintf("the waiter behind two dead ones (touch pace %v)", pace))
}

// lockedBetween waits for the lock that got brings, which must come
// between early and late after released (the claim window of a dead head
// first), and releases it; who names the waiter in what it reports.
func lockedBetween(ctx context.Context, t *testing.T, got <-chan *core.Lock, released time.Time, early, late time.Duration, who string) {
	t.Helper()
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		d := time.Since(released)
		t.Logf("%s got the key %v after the release", who, d)
		if d < early {
			t.Errorf("%s got the key %v after the release, before %v (a dead head's claim window)", who, d, early)
		}
		l.Release(ctx)
	case <-time.After(late):
		t.Fatalf("%s did not get the key within %v of the release", who, late)
	}
}
