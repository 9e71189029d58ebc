package etcdlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fair queueing (core.CapFair). A queued waiter is one etcd key, its
// entry, attached to a short etcd lease of its own that the waiter renews
// each time it asks again; the entry's create revision is its place.
// Nobody takes a key whose queue is not empty except its head, which
// takes it once it is free; see doc.go.

// queueRoot starts every queue entry's key. A lease's key starts with
// the Client's key prefix, which has no brace, so no lease key — and no
// other key named after a lease's — starts with it.
const queueRoot = "{queue}"

// entryTTL is the etcd lease TTL of a queue entry, in seconds: a waiter
// asks again at least every second and so renews it; the entry of a
// waiter that stopped asking (its process died, its connection broke) is
// deleted by etcd within entryTTL (or etcd's minimum TTL, if larger).
const entryTTL = 3

// staleLocal is how long after its waiter last asked this process stops
// counting an entry as its own (the waiter gave up and its Release
// failed; etcd deletes the entry by then).
const staleLocal = entryTTL * time.Second

// queuePrefix is the prefix of key's queue entries. The key's length
// makes it unambiguous: no key's queue prefix begins with another's.
func queuePrefix(key string) string {
	return queueRoot + strconv.Itoa(len(key)) + ":" + key + "/"
}

// entryKey is token's queue entry for key.
func entryKey(key, token string) string { return queuePrefix(key) + token }

// headOp reads the first entry of key's queue (its Count is the queue's
// length).
func headOp(key string) clientv3.Op {
	return clientv3.OpGet(queuePrefix(key), clientv3.WithFirstCreate()...)
}

// noQueue holds when key has no queue entry (a range compare on an
// empty range compares the zero revision).
func noQueue(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(queuePrefix(key)), "=", 0).WithPrefix()
}

// rangeKV is the i-th response of a transaction, a Get, and its first key
// (nil if none); n is the Get's count.
func rangeKV(resp *clientv3.TxnResponse, i int) (kv *mvccpb.KeyValue, n int64) {
	if i >= len(resp.Responses) {
		return nil, 0
	}
	r := resp.Responses[i].GetResponseRange()
	if r == nil {
		return nil, 0
	}
	if len(r.Kvs) > 0 {
		kv = r.Kvs[0]
	}
	return kv, r.Count
}

// local is a queue entry of one of this process's waiters.
type local struct {
	rev   int64     // its create revision: its place
	asked time.Time // when its waiter last asked
}

// setLocal records token's entry of key at revision rev; a new place
// moves the subscription's watch.
func (b *backend) setLocal(key, token string, rev int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queued[key]
	if q == nil {
		q = map[string]local{}
		b.queued[key] = q
	}
	old, ok := q[token]
	q[token] = local{rev: rev, asked: time.Now()}
	if !ok || old.rev != rev {
		b.poke(key)
	}
}

// dropLocal forgets token's entry of key.
func (b *backend) dropLocal(key, token string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.queued[key][token]; ok {
		delete(b.queued[key], token)
		if len(b.queued[key]) == 0 {
			delete(b.queued, key)
		}
		b.poke(key)
	}
}

// isLocal reports whether token waits in key's queue from this process.
func (b *backend) isLocal(key, token string) (local, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.queued[key][token]
	return e, ok
}

// firstLocal is the earliest entry of key's queue of a waiter of this
// process that still asks; stale ones are forgotten.
func (b *backend) firstLocal(key string) (token string, rev int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for tok, e := range b.queued[key] {
		if now.Sub(e.asked) > staleLocal {
			delete(b.queued[key], tok)
			continue
		}
		if !ok || e.rev < rev {
			token, rev, ok = tok, e.rev, true
		}
	}
	if len(b.queued[key]) == 0 {
		delete(b.queued, key)
	}
	return token, rev, ok
}

// poke tells key's watch that this process's queue changed. Called with
// b.mu held.
func (b *backend) poke(key string) {
	if s := b.subs[key]; s != nil && !s.gone {
		s.kick()
	}
}

// enqueue puts req.Token in req.Key's queue, or keeps its place there:
// mine is its entry as just read (nil: none). An entry whose etcd lease
// ran out is gone, and the waiter queues again, last.
func (b *backend) enqueue(ctx context.Context, req core.AcquireRequest, mine *mvccpb.KeyValue) error {
	if mine != nil {
		_, err := b.lease.KeepAliveOnce(ctx, clientv3.LeaseID(mine.Lease))
		switch {
		case err == nil:
			b.setLocal(req.Key, req.Token, mine.CreateRevision)
			return nil
		case !errors.Is(err, rpctypes.ErrLeaseNotFound):
			return err
		}
		// etcd deleted the entry before it said so: queue again.
	}
	q := entryKey(req.Key, req.Token)
	g, err := b.lease.Grant(ctx, entryTTL)
	if err != nil {
		return err
	}
	// The value is when the waiter queued, by its clock (Inspect's
	// OldestWait).
	stamp := strconv.FormatInt(time.Now().UnixMilli(), 10)
	resp, err := b.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(q), "=", 0)).
		Then(clientv3.OpPut(q, stamp, clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(q)).
		Commit()
	if err != nil {
		b.revoke(ctx, int64(g.ID)) // deletes the entry if it was created
		return err
	}
	if resp.Succeeded {
		b.setLocal(req.Key, req.Token, resp.Header.Revision)
		return nil
	}
	// Created meanwhile by another call of the same token: keep that one.
	b.revoke(ctx, int64(g.ID))
	if kv, _ := rangeKV(resp, 0); kv != nil {
		b.setLocal(req.Key, req.Token, kv.CreateRevision)
	}
	return nil
}

// take gives req.Key to req.Token, the head of its queue (its entry
// mine), on the etcd lease g: only if the key is free, the entry is
// unchanged and no entry is older. The entry goes in the same step, and
// its etcd lease after.
func (b *backend) take(ctx context.Context, req core.AcquireRequest, mine *mvccpb.KeyValue, g clientv3.LeaseID) (int64, error) {
	q := entryKey(req.Key, req.Token)
	resp, err := b.kv.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(req.Key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(q), "=", mine.CreateRevision),
			clientv3.Compare(clientv3.CreateRevision(queuePrefix(req.Key)), ">", mine.CreateRevision-1).WithPrefix(),
		).
		Then(clientv3.OpPut(req.Key, req.Token+sep+req.Metadata, clientv3.WithLease(g)), clientv3.OpDelete(q)).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errChanged
	}
	b.dropLocal(req.Key, req.Token)
	b.revoke(ctx, mine.Lease)
	return resp.Header.Revision, nil
}

// stillQueued serves a queued waiter of this process asking again: if it
// still waits (the key is held, or an older entry is queued), its entry
// is renewed and ok is true, in two requests (a read and a renewal).
// Otherwise ok is false and Acquire decides: turn is the waiter's entry
// when it heads the queue of a free key, nil for a re-entry or an entry
// gone.
func (b *backend) stillQueued(ctx context.Context, req core.AcquireRequest) (r core.AcquireResult, turn *mvccpb.KeyValue, ok bool, err error) {
	resp, err := b.kv.Txn(ctx).Then(
		clientv3.OpGet(req.Key),
		headOp(req.Key),
		clientv3.OpGet(entryKey(req.Key, req.Token)),
	).Commit()
	if err != nil {
		return core.AcquireResult{}, nil, false, err
	}
	kv, _ := rangeKV(resp, 0)
	head, _ := rangeKV(resp, 1)
	mine, _ := rangeKV(resp, 2)
	switch {
	case mine == nil: // expired: queue again
		b.dropLocal(req.Key, req.Token)
		return core.AcquireResult{}, nil, false, nil
	case kv == nil && head != nil && head.CreateRevision == mine.CreateRevision: // its turn
		return core.AcquireResult{}, mine, false, nil
	case kv != nil && tokenOf(kv.Value) == req.Token: // re-entry
		return core.AcquireResult{}, nil, false, nil
	}
	_, err = b.lease.KeepAliveOnce(ctx, clientv3.LeaseID(mine.Lease))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		b.dropLocal(req.Key, req.Token)
		return core.AcquireResult{}, nil, false, nil
	case err != nil:
		return core.AcquireResult{}, nil, false, err
	}
	b.setLocal(req.Key, req.Token, mine.CreateRevision)
	r = core.AcquireResult{Queued: true, HolderTTL: -1}
	if kv != nil && !b.notify {
		// Polling: the holder's expiry bounds the sleep. With watches,
		// an expiry wakes the head.
		r.HolderTTL = b.holderTTL(ctx, kv.Lease)
	}
	return r, nil, true, nil
}

// Leave takes token out of key's queue (core.QueueLeaver): it deletes the
// token's queue entry, if any, and revokes the entry's etcd lease, as
// Release does, and leaves the key itself be: a waiter under a token
// shared with another process (core.WithToken) that gives up just as the
// other claimed the key does not delete the other's lease. There is no
// grant to pass on: the head of a queue takes a free key itself.
func (b *backend) Leave(ctx context.Context, key, token string) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	b.dropLocal(key, token)
	resp, err := b.kv.Delete(ctx, entryKey(key, token), clientv3.WithPrevKV())
	if err != nil {
		return err
	}
	if len(resp.PrevKvs) > 0 && resp.PrevKvs[0].Lease != 0 {
		b.revoke(ctx, resp.PrevKvs[0].Lease)
	}
	return nil
}

// waiters reads the length of key's queue and how long its head has
// waited, from a head read by headOp.
func waiters(head *mvccpb.KeyValue, n int64) (int, time.Duration) {
	if head == nil || n == 0 {
		return 0, 0
	}
	var wait time.Duration
	if ms, err := strconv.ParseInt(string(head.Value), 10, 64); err == nil {
		wait = max(time.Since(time.UnixMilli(ms)), 0)
	}
	return int(n), wait
}
