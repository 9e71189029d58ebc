package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// queueMember puts member "<token>|<prefix>:grants:<client>" at the tail of
// key's waiters under prefix, as a Client "client" that nobody hears
// (crashed) would have queued it, and enters that Client in the key's A
// until life from now (life ≤ 0: not at all, as a Client that lapsed).
func queueMember(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix, key, client, token string, life time.Duration) {
	t.Helper()
	w, ch := prefix+":{"+key+"}:w", prefix+":grants:"+client
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, w, redis.Z{Score: float64(now.UnixMicro()), Member: token + "|" + ch}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, w, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if life <= 0 { // a Client that lapsed and was dropped from A
		return
	}
	a := w + ":a"
	if err := rdb.ZAdd(ctx, a, redis.Z{Score: float64(now.Add(life).UnixMilli()), Member: ch}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, a, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

// A process that crashed while two of its goroutines queued for a key
// leaves two members at the head of W whose Client is still in A
// (up to 30 s). A release grants the key to the first of them and
// tells "next in line" to the second — the same dead process — so nobody
// alive hears that the grant may lapse. The live waiter behind them must
// still get the key about one claim window per dead member after the
// release (the documented cost of a dead head), not only at its next
// touch (about 10 s later).
func TestReviewTwoDeadHeadsOfOneProcess(t *testing.T) {
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 40*time.Second)

	holder := heldWithDeadQueued(ctx, t, rdb, prefix, a, 25*time.Second, "crashed", "crashed")
	got := make(chan *core.Lock, 1)
	go func() {
		l, err := w.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueueLen(ctx, t, rdb, prefix, "k", 3)
	time.Sleep(700 * time.Millisecond) // past the waiter's first re-attempt: it sleeps on its touch timer now
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	d := time.Since(released)
	t.Logf("the live waiter behind two dead members of one process got the key %v after the release", d)
	if d > 4*time.Second {
		t.Errorf("got the key %v after the release; two dead heads should cost about two claim windows (1 s each)", d)
	}
}

// The waiter told it is next in line behind a grant that will lapse (its
// grantee's process died) gives up before the claim window passes: the
// waiter behind it is next in line now, and must learn it then — not at
// its next touch, about 10 s later.
func TestReviewNextInLineGivesUp(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := ctxFor(t, 40*time.Second)
	a := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer a.Close()
	w1 := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer w1.Close()
	w2 := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer w2.Close()

	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	queueMember(ctx, t, rdb, prefix, "k", "crashed", "dead", 25*time.Second)
	quit := make(chan struct{})
	left := make(chan error, 1)
	go func() { // next in line; gives up 300 ms after the release
		qctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { <-quit; time.Sleep(300 * time.Millisecond); cancel() }()
		l, err := w1.Lock(qctx, "k", core.WithFair())
		if err == nil {
			l.Release(ctx)
		}
		left <- err
	}()
	waitQueueLen(ctx, t, rdb, prefix, "k", 2)
	got := make(chan *core.Lock, 1)
	go func() {
		l, err := w2.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueueLen(ctx, t, rdb, prefix, "k", 3)
	time.Sleep(700 * time.Millisecond) // past the waiters' first re-attempts
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(quit)
	if err := <-left; err == nil {
		t.Fatal("the waiter next in line acquired; want it to give up")
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	d := time.Since(released)
	t.Logf("the waiter behind one that gave up got the key %v after the release", d)
	if d > 4*time.Second {
		t.Errorf("got the key %v after the release; want about one claim window (1 s) after the one ahead gave up", d)
	}
}

// A waiter of another Client queued behind a busy Client's waiters hears
// "next in line" at each of their handoffs (the one truly next is the
// grantee's Client's own, see lib_wait.lua). Those hints come faster than
// a claim window; they must not keep postponing its look at the key for
// good: it still keeps its place (its Client in A), and gets the
// key in its turn rather than being dropped as dead when it reaches the
// head.
func TestReviewHintsDoNotSilenceAWaiter(t *testing.T) {
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := ctxFor(t, 40*time.Second)
	busy := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer busy.Close()
	other := mustNew(core.NewRedis(redistest.Client(t), core.WithKeyPrefix(prefix)))
	defer other.Close()

	holder, err := busy.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const loopers = 12
	for i := range loopers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := busy.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(30*time.Second))
				if err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
				l.Release(ctx)
			}
		}()
		waitQueueLen(ctx, t, rdb, prefix, "k", int64(i+1))
	}
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		l, err := other.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(15*time.Second))
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	waitQueueLen(ctx, t, rdb, prefix, "k", loopers+1)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-got
	d := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the other Client's waiter, behind %d waiters holding 300 ms each: %v", loopers, err)
	}
	t.Logf("the other Client's waiter got the key after %v", d)
}
