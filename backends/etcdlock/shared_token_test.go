package etcdlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stallKV passes every call through, except that, armed, the next
// transaction's Commit waits for its context to end and fails with it: a
// call that does not get through before its caller gives up.
type stallKV struct {
	clientv3.KV
	armed atomic.Bool
	hits  atomic.Int32
}

func (k *stallKV) Txn(ctx context.Context) clientv3.Txn {
	if k.armed.CompareAndSwap(true, false) {
		k.hits.Add(1)
		return stalledTxn{ctx}
	}
	return k.KV.Txn(ctx)
}

type stalledTxn struct{ ctx context.Context }

func (t stalledTxn) If(...clientv3.Cmp) clientv3.Txn  { return t }
func (t stalledTxn) Then(...clientv3.Op) clientv3.Txn { return t }
func (t stalledTxn) Else(...clientv3.Op) clientv3.Txn { return t }
func (t stalledTxn) Commit() (*clientv3.TxnResponse, error) {
	<-t.ctx.Done()
	return nil, t.ctx.Err()
}

// Two processes wait fairly under one token T (WithToken). The key is
// released; A, the queue's head, claims it, while B's next attempt does
// not get through before B's wait ends. B gives up: before QueueLeaver,
// core took B out of the queue with Release of T, which deleted the key
// A had just claimed — a third process took it while A believed it held
// it. B now only leaves the queue.
func TestSharedTokenWaiterGivingUpKeepsTwinsLease(t *testing.T) {
	ep := startEtcd(t)
	holder := newClient(t, newCli(t, ep))
	a := newClient(t, newCli(t, ep))
	cliB := newCli(t, ep)
	stall := &stallKV{KV: cliB.KV}
	cliB.KV = stall
	b := newClient(t, cliB)
	third := newClient(t, newCli(t, ep))
	ctx := ctxT(t)
	const key, tok = "shared-give-up", "job-shared-t"

	h, err := holder.TryLock(ctx, key, core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, key, core.WithToken(tok), core.WithFair(), core.WithWaitTimeout(2*time.Second))
		if err == nil {
			l.Release(ctx)
		}
		bDone <- err
	}()
	waitWaiters(t, holder, key, 1) // B is queued, under T
	stall.armed.Store(true)        // B's next attempt hangs until its wait ends
	aDone := make(chan *core.Lock, 1)
	go func() {
		l, err := a.Lock(ctx, key, core.WithToken(tok), core.WithFair(), core.WithTTL(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		aDone <- l
	}()
	time.Sleep(300 * time.Millisecond) // A asks (and shares T's entry)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la := <-aDone
	if la == nil {
		return
	}
	defer la.Release(ctx)
	if err := <-bDone; err == nil {
		t.Fatal("B acquired: its attempt was not stalled")
	} else {
		t.Logf("B gave up: %v", err)
	}
	if stall.hits.Load() != 1 {
		t.Fatalf("B's attempts stalled: %d, want 1", stall.hits.Load())
	}
	if la.Err() != nil {
		t.Logf("A was told: %v", la.Err())
	}
	if l3, err := third.TryLock(ctx, key); err == nil {
		defer l3.Release(ctx)
		t.Fatalf("a third Client took the key (fence %d) that A holds under the shared token (fence %d; A's Err: %v)",
			l3.Fence(), la.Fence(), la.Err())
	}
	if la.Err() != nil {
		t.Fatalf("A lost its lease: %v", la.Err())
	}
}

// waitWaiters waits until key's queue has n waiters.
func waitWaiters(t *testing.T, c *core.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := c.Inspect(ctxT(t), key)
		if err == nil && info.Waiters >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters of %q: %+v %v, want %d", key, info, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
