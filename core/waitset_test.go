package core_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// A Client's queued waiters of one key keep their places with one touch
// per key, not one each: eight waiters touching every second make about
// two touches a second between them (one per half period), not eight.
func TestTouchOncePerClientAndKey(t *testing.T) {
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	ctx, rdb, prefix, a, w, hook := touchedWaiter(t)

	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	acquired := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := w.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			acquired <- struct{}{}
			l.Release(ctx)
		}()
	}
	waitQueueLen(ctx, t, rdb, prefix, "k", n)
	time.Sleep(700 * time.Millisecond) // a waiter that joined before its Client heard grants re-attempts once
	hook.take()
	time.Sleep(3500 * time.Millisecond)
	calls := hook.take()
	touches := calls[core.QueueTouchHash]
	delete(calls, core.QueueTouchHash)
	attempts := 0
	for _, c := range calls {
		attempts += c
	}
	t.Logf("%d waiters in 3.5 s: %d touches, %d attempts", n, touches, attempts)
	if touches < 2 || touches > 9 || attempts > 0 {
		t.Errorf("%d waiters of one Client touched %d times and attempted %d times in 3.5 s; want 2 to 9 touches (one per half second at most) and no attempt", n, touches, attempts)
	}
	if got := rdb.ZCard(ctx, prefix+":{k}:w").Val(); got != n {
		t.Errorf("%d waiters queued, want %d", got, n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(acquired) != n {
		t.Fatalf("%d of %d waiters acquired", len(acquired), n)
	}
}

// A release skips the waiters of a Client no longer in A (a process that
// died, dropped by another Client's touch once it lapsed): the key goes to the next live waiter, and no grant
// is published to the dead one's channel.
func TestReleaseSkipsDeadClientsWaiters(t *testing.T) {
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 30*time.Second)

	ps := rdb.Subscribe(ctx, prefix+":grants:dead")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	queueDeadWaiter(ctx, t, rdb, prefix, "k", 0) // its Client lapsed, and was dropped from A
	got := fairLockAsync(ctx, t, w, "k")
	waitQueueLen(ctx, t, rdb, prefix, "k", 2)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	select {
	case m := <-ps.Channel():
		t.Fatalf("a grant went to the dead waiter's channel: %q", m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
	if n := rdb.ZCard(ctx, prefix+":{k}:w").Val(); n != 0 {
		t.Errorf("%d members left in W, want 0 (the dead one dropped)", n)
	}
}

// A key found free while waiters queue — its holder expired without a
// release — goes to the longest-waiting live waiter: whoever finds it free
// grants it on. Here the head is a waiter whose Client lives but which
// never claims (it gave up and its leave was lost): the waiter behind it
// gets the key after the head's claim window, long before the head's
// Client would be judged dead (20 s).
func TestFreeKeyGrantedOnToHead(t *testing.T) {
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 30*time.Second)

	if _, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(1500*time.Millisecond), core.WithAutoRenew(false)); err != nil {
		t.Fatal(err)
	}
	queueDeadWaiter(ctx, t, rdb, prefix, "k", 20*time.Second)
	start := time.Now()
	l, err := w.Lock(ctx, "k", core.WithFair(), core.WithWaitTimeout(8*time.Second))
	if err != nil {
		t.Fatalf("the waiter behind a head that never claims did not get the freed key: %v", err)
	}
	t.Logf("got the key %v after queueing (holder's TTL 1.5 s, a claim window 1 s)", time.Since(start))
	l.Release(ctx)
}

// A waiter whose entry vanished (W expired, say, or a release dropped it
// as its Client had lapsed from A) finds out at its Client's next
// touch and queues again.
func TestTouchRequeuesLostEntry(t *testing.T) {
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 30*time.Second)

	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := fairLockAsync(ctx, t, w, "k")
	waitQueueLen(ctx, t, rdb, prefix, "k", 1)
	rdb.Del(ctx, prefix+":{k}:w")
	waitQueueLen(ctx, t, rdb, prefix, "k", 1) // within 5 s: it touches every second
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l != nil {
		l.Release(ctx)
	}
}

// A process killed while it waits holds nobody up for longer than its
// registration lives: here a child process queues behind the holder and
// is killed (SIGKILL), and a waiter queued behind it gets the key soon
// after the release — within the child's entry TTL (3 s) — and the child
// never gets it.
func TestKilledWaiterProcess(t *testing.T) {
	if os.Getenv("LATCHKEY_WAIT_CHILD") != "" {
		return // the child's part is TestHelperWaiterChild
	}
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 40*time.Second)

	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run", "^TestHelperWaiterChild$", "-test.v")
	child.Env = append(os.Environ(), "LATCHKEY_WAIT_CHILD="+prefix, "REDIS_ADDR="+redistest.Addr(t))
	var out strings.Builder
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	waitQueueLen(ctx, t, rdb, prefix, "k", 1)
	got := fairLockAsync(ctx, t, w, "k")
	waitQueueLen(ctx, t, rdb, prefix, "k", 2)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true
	if strings.Contains(out.String(), "child acquired") {
		t.Fatalf("the child acquired before it was killed:\n%s", out.String())
	}
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		d := time.Since(released)
		t.Logf("the waiter behind a killed process got the key %v after the release", d)
		if d > 5*time.Second {
			t.Errorf("got the key %v after the release; the killed waiter's entry lives 3 s", d)
		}
		l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a killed process did not get the key within 10 s of the release")
	}
}

// TestHelperWaiterChild is TestKilledWaiterProcess's child: it queues for
// the key and waits until killed.
func TestHelperWaiterChild(t *testing.T) {
	prefix := os.Getenv("LATCHKEY_WAIT_CHILD")
	if prefix == "" {
		t.Skip("the child process of TestKilledWaiterProcess")
	}
	defer core.SetTouchTimings(time.Second, 3*time.Second)()
	rdb := redistest.Client(t)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	l, err := c.Lock(context.Background(), "k", core.WithFair(), core.WithWaitTimeout(time.Minute))
	if err == nil {
		fmt.Println("child acquired", l.Token())
	}
}

// Inspect counts the waiters whose Clients are alive: a member of a Client
// that died (dropped from A) is not a waiter, and the oldest wait is the
// first live one's.
func TestInspectCountsLiveWaiters(t *testing.T) {
	ctx, rdb, prefix, a, w := holderAndWaiter(t, 30*time.Second)
	holder, err := a.TryLock(ctx, "k", core.WithFair(), core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	queueDeadWaiter(ctx, t, rdb, prefix, "k", 0) // ahead of the live one
	time.Sleep(300 * time.Millisecond)           // the dead one has waited longer
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.Lock(wctx, "k", core.WithFair(), core.WithWaitTimeout(20*time.Second))
	waitQueueLen(ctx, t, rdb, prefix, "k", 2)
	info, err := a.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Waiters != 1 {
		t.Errorf("Waiters = %d, want 1 (the dead Client's member is no waiter)", info.Waiters)
	}
	if info.OldestWait >= 300*time.Millisecond {
		t.Errorf("OldestWait = %v: the dead member's, not the live waiter's", info.OldestWait)
	}
}
