package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// Two processes share a token (core.WithToken). A waits, fairly, with
// token T behind a holder H; B asks for the key with the same token, also
// fairly, and gives up. B's failed acquisition must not take A's node —
// least of all after A's turn came and A holds the lease. As first built
// (found by review 9), B adopted A's queued node as its own, was refused
// the lease when A claimed it, and its give-up released the token: A's
// node was deleted, and C took the key while A believed it held it (3 of
// 3 runs). Fixed twice over: zklock never adopts nor deletes another
// session's node, and core's waiter under a caller's token releases
// nothing when it gives up on a backend of New.
func TestReview9ForeignTokenWaiterDeletesHolder(t *testing.T) {
	h, a, b, c := newClient(t), newClient(t), newClient(t), newClient(t)
	ctx := ctxT(t)
	const key, tok = "review9-foreign", "shared-token-9"
	hl, err := h.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	aGot := make(chan *core.Lock, 1)
	go func() {
		l, err := a.Lock(ctx, key, core.WithToken(tok), core.WithFair(), core.WithTTL(30*time.Second))
		if err != nil {
			t.Error("A:", err)
		}
		aGot <- l
	}()
	waitInfo(t, c, key, func(i core.Info) bool { return i.Waiters == 1 })
	bDone := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, key, core.WithToken(tok), core.WithFair(), core.WithWaitTimeout(3*time.Second))
		if err == nil {
			l.Release(context.Background())
		}
		bDone <- err
	}()
	time.Sleep(500 * time.Millisecond) // B is queued (on A's node)
	mustRelease(t, hl)
	al := <-aGot
	if al == nil {
		t.FailNow()
	}
	defer al.Release(context.Background())
	t.Logf("A holds with fence %d", al.Fence())
	berr := <-bDone
	t.Logf("B's Lock: %v", berr)
	time.Sleep(100 * time.Millisecond)
	select {
	case <-al.Lost():
		t.Logf("A was told it lost the lease: %v", al.Err())
		return
	default:
	}
	cl, err := c.TryLock(ctx, key)
	if err == nil {
		defer cl.Release(context.Background())
		select {
		case <-al.Lost():
		default:
			t.Fatalf("C took the key (fence %d) while A (fence %d) still believes it holds it (Err %v)", cl.Fence(), al.Fence(), al.Err())
		}
	} else if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatal(err)
	}
}

// The same root cause without a wait: B's TryLock with A's token, while A
// is queued, deleted A's queued node as "a leftover of an attempt that
// failed" (again, case e == nil): A lost its place in the fair queue to
// a waiter that came after it (review 9; 2 of 2 runs).
func TestReview9ForeignTokenTryLockDeletesQueuedNode(t *testing.T) {
	h, a, b, c, d := newClient(t), newClient(t), newClient(t), newClient(t), newClient(t)
	ctx := ctxT(t)
	const key, tok = "review9-queued", "shared-token-9q"
	hl, err := h.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	aGot, dGot := make(chan *core.Lock, 1), make(chan *core.Lock, 1)
	go func() {
		l, _ := a.Lock(ctx, key, core.WithToken(tok), core.WithFair())
		aGot <- l
	}()
	waitInfo(t, c, key, func(i core.Info) bool { return i.Waiters == 1 })
	if _, err := b.TryLock(ctx, key, core.WithToken(tok)); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("B's TryLock: %v", err)
	}
	go func() { // D comes after A
		l, _ := d.Lock(ctx, key, core.WithFair())
		dGot <- l
	}()
	time.Sleep(300 * time.Millisecond)
	mustRelease(t, hl)
	select {
	case l := <-aGot:
		mustRelease(t, l)
		<-dGot
	case l := <-dGot:
		mustRelease(t, l)
		<-aGot
		t.Fatal("D, queued after A, was served first: B's TryLock deleted A's queued node")
	}
}
