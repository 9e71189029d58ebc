package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lossyKV commits transactions normally, but when armed, a transaction
// that puts a key on an etcd lease is committed by etcd and its answer is
// lost: the caller gets an error (as after a deadline that fires, or a
// connection that breaks, between etcd's commit and the answer).
type lossyKV struct {
	clientv3.KV
	records bool // lose the answers of records' puts instead of leases'
	armed   atomic.Bool
	hits    atomic.Int32
}

var errLostAnswer = errors.New("review8: the answer was lost (the transaction was committed)")

func (k *lossyKV) Txn(ctx context.Context) clientv3.Txn {
	return &lossyTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type lossyTxn struct {
	clientv3.Txn
	kv     *lossyKV
	putsOn bool
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if !op.IsPut() || len(op.KeyBytes()) == 0 {
			continue
		}
		isRecord := strings.HasPrefix(string(op.KeyBytes()), "{rec}")
		isLease := op.KeyBytes()[0] != '{' // not a queue entry, not a record
		if (t.kv.records && isRecord) || (!t.kv.records && isLease) {
			t.putsOn = true
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && resp.Succeeded && t.putsOn && t.kv.armed.CompareAndSwap(true, false) {
		t.kv.hits.Add(1)
		return nil, errLostAnswer
	}
	return resp, err
}

// Lock.Extend with a TTL longer than the etcd lease's moves the key to a
// new etcd lease g. If the move's answer is lost, Extend revokes g — which
// now carries the key — and deletes the holder's key, while the holder,
// told only that the call failed ("A failed call leaves the lease and its
// deadline as they were"), still believes it holds the key. Another
// Client takes it at once.
// An Extend to a TTL longer than the etcd lease's moves the key to a new
// lease. When etcd committed the move but its answer was lost, the backend
// revoked the new lease (found by review 8): that deleted the key, while
// core, told the Extend failed, kept the holder's deadline, and another
// Client took the key at once. The new lease is now left to its TTL.
func TestReview8ExtendLostMoveDeletesHeldKey(t *testing.T) {
	ep := startEtcd(t)
	cliA := newCli(t, ep)
	lossy := &lossyKV{KV: cliA.KV}
	cliA.KV = lossy
	a := newClient(t, cliA)
	b := newClient(t, newCli(t, ep))
	ctx := ctxT(t)

	h, err := a.TryLock(ctx, "r8-extend", core.WithTTL(3*time.Second), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	lossy.armed.Store(true)
	err = h.Extend(ctx, 30*time.Second) // longer than the etcd lease: a move
	if lossy.hits.Load() != 1 {
		t.Fatalf("the move's answer was not lost (Extend: %v)", err)
	}
	t.Logf("Extend: %v", err)
	if h.Err() != nil {
		t.Fatalf("the holder was told: %v", h.Err())
	}
	h2, err := b.TryLock(ctx, "r8-extend", core.WithTTL(3*time.Second))
	if err == nil {
		lostYet := h.Err()
		t.Fatalf("another Client took the key (fence %d) while its holder (fence %d) still believes it holds it (holder's Err: %v)",
			h2.Fence(), h.Fence(), lostYet)
	}
	t.Logf("TryLock by another Client: %v", err)
}

// A re-entry under WithToken with a longer TTL moves the key to the new
// etcd lease g; if the move's answer is lost, Acquire's deferred revoke of
// g deletes the key the holder (another process) holds. core's WithToken
// promises that a failed acquisition under the token "takes back only a
// lease it set itself, never one it re-entered: that one is its holder's".
// A re-entry under WithToken with a longer TTL moves the holder's key to
// the new lease; a lost answer then revoked that lease, deleting the key
// of a holder elsewhere (review 8). WithToken promises a failed
// acquisition never takes back a lease it re-entered.
func TestReview8ReentryLostMoveDeletesHoldersKey(t *testing.T) {
	ep := startEtcd(t)
	a := newClient(t, newCli(t, ep))
	cliB := newCli(t, ep)
	lossy := &lossyKV{KV: cliB.KV}
	cliB.KV = lossy
	b := newClient(t, cliB)
	c := newClient(t, newCli(t, ep))
	ctx := ctxT(t)

	h, err := a.TryLock(ctx, "r8-reenter", core.WithTTL(3*time.Second), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	lossy.armed.Store(true)
	_, err = b.TryLock(ctx, "r8-reenter", core.WithToken(h.Token()), core.WithTTL(30*time.Second))
	if lossy.hits.Load() != 1 {
		t.Fatalf("the move's answer was not lost (TryLock: %v)", err)
	}
	t.Logf("re-entry under the token: %v", err)
	if h.Err() != nil {
		t.Fatalf("the holder was told: %v", h.Err())
	}
	h3, err := c.TryLock(ctx, "r8-reenter", core.WithTTL(3*time.Second))
	if err == nil {
		t.Fatalf("a third Client took the key (fence %d) while its holder (fence %d) still believes it holds it (holder's Err: %v)",
			h3.Fence(), h.Fence(), h.Err())
	}
	t.Logf("TryLock by a third Client: %v", err)
}

// Records.SetIfNewer whose transaction etcd commits but whose answer is
// lost revokes the new etcd lease, which now carries the record: the
// record disappears altogether — the new value and the old one it
// replaced. (cronlock's last-run record of a job vanishes, and an older
// run's late record is then stored over nothing.)
// A record rewritten onto a new lease whose answer was lost: revoking the
// lease deleted the new record, and the old one was already replaced, so
// nothing was left (review 8).
func TestReview8SetIfNewerLostAnswerDeletesRecord(t *testing.T) {
	ep := startEtcd(t)
	cli := newCli(t, ep)
	lossy := &lossyKV{KV: cli.KV, records: true}
	cli.KV = lossy
	r := newClient(t, cli).Records()
	ctx := ctxT(t)
	if ok, err := r.SetIfNewer(ctx, "r8-rec", "tick1", 1, time.Minute); !ok || err != nil {
		t.Fatalf("SetIfNewer(tick1): %v %v", ok, err)
	}
	lossy.armed.Store(true)
	_, err := r.SetIfNewer(ctx, "r8-rec", "tick2", 2, time.Minute)
	if lossy.hits.Load() != 1 {
		t.Fatalf("the answer was not lost (SetIfNewer: %v)", err)
	}
	t.Logf("SetIfNewer(tick2): %v", err)
	v, ok, err := r.Get(ctx, "r8-rec")
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("the record is gone: neither tick1 (stored before) nor tick2")
	}
	t.Logf("record: %q", v)
}
