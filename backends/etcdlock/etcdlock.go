package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// New returns a core.Client whose leases live in etcd, reached through
// cli: one key per lease, attached to an etcd lease of its own. The Client
// declares core.CapFair (a key per queued waiter), core.CapNotify (unless
// WithNotify(false)), core.CapReplicaAck, core.CapList and core.CapClaims
// (records and claims, which cronlock needs; see the package documentation
// for their clock); it has no semaphores or read-write locks. The error is core.ErrInvalidOption for a nil cli or a
// bad option.
//
// New uses cli.KV, cli.Lease and cli.Watcher: a client whose three are
// wrapped by etcd's namespace package keeps the keys under its prefix.
// Closing the Client stops the backend's watches; it does not close cli,
// which must outlive the Client.
func New(cli *clientv3.Client, opts ...Option) (*core.Client, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcdlock: nil *clientv3.Client", core.ErrInvalidOption)
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	return core.New(newBackend(cli, cfg), cfg.core...)
}

func newBackend(cli *clientv3.Client, cfg config) *backend {
	return &backend{
		kv:      cli.KV,
		lease:   cli.Lease,
		watcher: cli.Watcher,
		timeout: cfg.timeout,
		notify:  cfg.notify,
		rec:     recordConfig{skew: cfg.skew, clock: cfg.clock},
		subs:    map[string]*sub{},
		queued:  map[string]map[string]local{},
	}
}

// sep ends the token in a key's value: the value is token|metadata, and a
// token never holds '|'.
const sep = "|"

// maxAttempts bounds the optimistic retries of one call whose compare
// failed because the key changed between two requests (a re-entry of the
// same token elsewhere, an expiry).
const maxAttempts = 8

// errBusy is the error of a call that lost maxAttempts races in a row.
var errBusy = errors.New("etcdlock: the key kept changing; gave up")

// backend implements core.Backend on etcd.
type backend struct {
	kv      clientv3.KV
	lease   clientv3.Lease
	watcher clientv3.Watcher
	timeout time.Duration
	notify  bool
	rec     recordConfig

	mu     sync.Mutex
	subs   map[string]*sub
	queued map[string]map[string]local // key → token → this process's queue entries
	closed bool
	wg     sync.WaitGroup
}

var (
	_ core.Backend     = (*backend)(nil)
	_ core.Notifier    = (*backend)(nil)
	_ core.Lister      = (*backend)(nil)
	_ core.QueueLeaver = (*backend)(nil)
)

func (b *backend) Capabilities() core.Capability {
	caps := core.CapFair | core.CapReplicaAck | core.CapList | core.CapClaims
	if b.notify {
		caps |= core.CapNotify
	}
	return caps
}

// bound applies the request timeout to a context without a deadline.
func (b *backend) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.timeout)
}

// keepMoved restarts the clock of g, onto which a move of a held key was
// committed or perhaps committed (its answer lost), as after a move that
// was answered: a renewal of the old lease that landed after g was granted
// is covered. Best effort and bounded; g is left to its TTL either way.
func (b *backend) keepMoved(ctx context.Context, g clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	_, _ = b.lease.KeepAliveOnce(ctx, g)
}

// ttlSeconds is d in whole seconds, rounded up, at least one: an etcd
// lease never ends before the TTL the Client asked for.
func ttlSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

func tokenOf(value []byte) string {
	tok, _, _ := strings.Cut(string(value), sep)
	return tok
}

// firstKV is the key read by the Else branch (a Get) of a transaction
// that did not succeed, or nil.
func firstKV(resp *clientv3.TxnResponse) *mvccpb.KeyValue {
	if len(resp.Responses) == 0 {
		return nil
	}
	if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
		return r.Kvs[0]
	}
	return nil
}

// revokeTimeout bounds the best-effort revocation of a lease no key uses
// any more (or one whose key's fate is unknown), also after the caller's
// context ended.
const revokeTimeout = 2 * time.Second

func (b *backend) revoke(ctx context.Context, id int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	_, _ = b.lease.Revoke(ctx, clientv3.LeaseID(id))
}

// Acquire grants an etcd lease of the TTL rounded up to whole seconds and
// creates the key on it if the key does not exist and nobody queues for
// it (its create revision is the fence). A key held by req.Token is
// re-entered (reenter); one held by another token, or free with waiters
// queued ahead, is contention — a fair caller with Enqueue then queues
// (enqueue), and the head of the queue takes a free key (take). The
// granted lease is revoked unless the key ends up on it — also when the
// answer was lost, so that a creation that did happen is undone (nobody
// holds it: the caller is told the acquisition failed) — but never after a
// re-entry's move whose answer was lost: the key it moved is its holder's.
func (b *backend) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	var turn *mvccpb.KeyValue
	if _, ok := b.isLocal(req.Key, req.Token); ok && req.Fair {
		r, t, ok, err := b.stillQueued(ctx, req)
		if ok || err != nil {
			return r, err
		}
		turn = t
	}
	val := req.Token + sep + req.Metadata
	g, err := b.lease.Grant(ctx, ttlSeconds(req.TTL))
	if err != nil {
		return core.AcquireResult{}, err
	}
	keep := false
	defer func() {
		if !keep {
			b.revoke(ctx, int64(g.ID))
		}
	}()
	if turn != nil { // its turn: take the key at once
		fence, err := b.take(ctx, req, turn, g.ID)
		switch {
		case err == nil:
			keep = true
			return core.AcquireResult{Acquired: true, Fence: fence}, nil
		case !errors.Is(err, errChanged):
			return core.AcquireResult{}, err
		}
	}
	q := entryKey(req.Key, req.Token)
	for range maxAttempts {
		resp, err := b.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(req.Key), "=", 0), noQueue(req.Key)).
			Then(clientv3.OpPut(req.Key, val, clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(req.Key), headOp(req.Key), clientv3.OpGet(q)).
			Commit()
		if err != nil {
			return core.AcquireResult{}, err
		}
		if resp.Succeeded {
			keep = true
			// The revision of this transaction is the key's create revision.
			return core.AcquireResult{Acquired: true, Fence: resp.Header.Revision}, nil
		}
		kv, _ := rangeKV(resp, 0)
		head, _ := rangeKV(resp, 1)
		mine, _ := rangeKV(resp, 2)
		switch {
		case kv != nil && tokenOf(kv.Value) == req.Token:
			moved, err := b.reenter(ctx, req.Key, kv, val, g)
			if errors.Is(err, errChanged) {
				continue
			}
			if err != nil {
				keep = moved // the key may be on g (reenter): revoking g would delete it
				return core.AcquireResult{}, err
			}
			keep = moved
			if mine != nil { // it holds the key: it waits no more
				_ = b.Leave(ctx, req.Key, req.Token) // best effort: the entry expires anyway
			}
			return core.AcquireResult{Acquired: true, Fence: kv.CreateRevision}, nil
		case kv == nil && head == nil:
			continue // released meanwhile
		case kv == nil && req.Fair && mine != nil && head.CreateRevision == mine.CreateRevision:
			fence, err := b.take(ctx, req, mine, g.ID)
			if errors.Is(err, errChanged) {
				continue
			}
			if err != nil {
				return core.AcquireResult{}, err
			}
			keep = true
			return core.AcquireResult{Acquired: true, Fence: fence}, nil
		}
		// Held by another token, or free with older waiters queued.
		holder := time.Duration(-1)
		if kv != nil {
			holder = b.holderTTL(ctx, kv.Lease)
		}
		if req.Fair && req.Enqueue {
			if err := b.enqueue(ctx, req, mine); err != nil {
				return core.AcquireResult{}, err
			}
			return core.AcquireResult{Queued: true, HolderTTL: holder}, nil
		}
		return core.AcquireResult{HolderTTL: holder}, nil
	}
	return core.AcquireResult{}, errBusy
}

// errChanged: the key changed since it was read; read it again.
var errChanged = errors.New("etcdlock: the key changed")

// reenter makes the lease of kv, which the re-entering token holds, last
// at least as long as the fresh lease g, and stores val (the new
// metadata). If the current lease's TTL is as long as g's, it is renewed
// (its remaining time becomes its whole TTL: never shorter than before,
// never shorter than g). Otherwise the key moves to g, which is then
// renewed, so that it lasts a whole TTL longer than the old one from now
// on; the old lease is revoked. moved reports the second case, and also a
// move whose answer was lost (with err): g may then carry the key, and the
// caller must not revoke it.
func (b *backend) reenter(ctx context.Context, key string, kv *mvccpb.KeyValue, val string, g *clientv3.LeaseGrantResponse) (moved bool, err error) {
	unchanged := clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
	ka, err := b.lease.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// The lease expired; etcd answers so only once it deleted the key.
		return false, errChanged
	case err != nil:
		return false, err
	}
	if ka.TTL >= g.TTL {
		var then []clientv3.Op
		if string(kv.Value) != val {
			then = append(then, clientv3.OpPut(key, val, clientv3.WithLease(clientv3.LeaseID(kv.Lease))))
		}
		// The key was on that lease when it was renewed: it has not
		// changed since it was read.
		resp, err := b.kv.Txn(ctx).If(unchanged).Then(then...).Commit()
		switch {
		case err != nil:
			return false, err
		case !resp.Succeeded:
			return false, errChanged
		}
		return false, nil
	}
	resp, err := b.kv.Txn(ctx).If(unchanged).Then(clientv3.OpPut(key, val, clientv3.WithLease(g.ID))).Commit()
	switch {
	case err != nil:
		// The move's fate is unknown: g may carry the holder's key. It is
		// never revoked (that would delete the key: review 8), and its
		// clock restarts as after a move that was answered.
		b.keepMoved(ctx, g.ID)
		return true, err
	case !resp.Succeeded:
		return false, errChanged
	}
	// Restart g's clock: a renewal of the old lease that landed after g was
	// granted is covered too.
	_, _ = b.lease.KeepAliveOnce(ctx, g.ID)
	b.revoke(ctx, kv.Lease)
	return true, nil
}

// holderTTL is an upper bound of the time left to the lease id, for a
// waiter's fallback sleep (a release or expiry wakes it by notification
// before): etcd reports whole seconds, rounded down. Negative: unknown.
func (b *backend) holderTTL(ctx context.Context, id int64) time.Duration {
	if id == 0 {
		return -1
	}
	r, err := b.lease.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil || r.TTL < 0 {
		return -1
	}
	return time.Duration(r.TTL+1) * time.Second
}

// Extend renews token's lease of key. The etcd lease is renewed first, and
// the key is then checked to be still unchanged on it, so that a lease
// confirmed was the key's when it was renewed. A ttl longer than the etcd
// lease's own moves the key to a new lease of that TTL (etcd cannot change
// a lease's TTL). left is the etcd lease's whole TTL, which runs from a
// moment after the request was sent.
func (b *backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	secs := ttlSeconds(ttl)
	for range maxAttempts {
		resp, err := b.kv.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) == 0 || tokenOf(resp.Kvs[0].Value) != token {
			return 0, core.ErrNotHeld
		}
		kv := resp.Kvs[0]
		unchanged := clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
		ka, err := b.lease.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease))
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return 0, core.ErrNotHeld
		case err != nil:
			return 0, err
		}
		if ka.TTL >= secs {
			tr, err := b.kv.Txn(ctx).If(unchanged).Commit()
			if err != nil {
				return 0, err
			}
			if !tr.Succeeded {
				continue
			}
			return time.Duration(ka.TTL) * time.Second, nil
		}
		g, err := b.lease.Grant(ctx, secs)
		if err != nil {
			return 0, err
		}
		tr, err := b.kv.Txn(ctx).If(unchanged).Then(clientv3.OpPut(key, string(kv.Value), clientv3.WithLease(g.ID))).Commit()
		if err != nil {
			b.keepMoved(ctx, g.ID) // the move's fate is unknown: as in reenter
			return 0, err
		}
		if !tr.Succeeded {
			b.revoke(ctx, int64(g.ID))
			continue
		}
		_, _ = b.lease.KeepAliveOnce(ctx, g.ID)
		b.revoke(ctx, kv.Lease)
		return time.Duration(g.TTL) * time.Second, nil
	}
	return 0, errBusy
}

// Release deletes key if token holds it (compare on the value; when the
// lease carries metadata, on the revision read), then revokes its etcd
// lease, which no key uses any more. In the same step it deletes token's
// queue entry, if any (a waiter that gives up), and then revokes the
// entry's etcd lease.
func (b *backend) Release(ctx context.Context, key, token string) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	b.dropLocal(key, token)
	cmp := clientv3.Compare(clientv3.Value(key), "=", token+sep)
	leave := clientv3.OpDelete(entryKey(key, token), clientv3.WithPrevKV())
	for range maxAttempts {
		resp, err := b.kv.Txn(ctx).If(cmp).
			Then(clientv3.OpDelete(key, clientv3.WithPrevKV()), leave).
			Else(clientv3.OpGet(key), leave).
			Commit()
		if err != nil {
			return false, err
		}
		if d := resp.Responses[1].GetResponseDeleteRange(); d != nil && len(d.PrevKvs) > 0 && d.PrevKvs[0].Lease != 0 {
			b.revoke(ctx, d.PrevKvs[0].Lease)
		}
		if resp.Succeeded {
			if d := resp.Responses[0].GetResponseDeleteRange(); d != nil && len(d.PrevKvs) > 0 && d.PrevKvs[0].Lease != 0 {
				b.revoke(ctx, d.PrevKvs[0].Lease)
			}
			return true, nil
		}
		kv := firstKV(resp)
		if kv == nil || tokenOf(kv.Value) != token {
			return false, nil
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
	}
	return false, errBusy
}

// Inspect reads key, the length and head of its queue, and its lease's
// remaining time (whole seconds, rounded down). A free key's Fence is the
// store's current revision: at least every fence given out for the key,
// and below the next one. OldestWait is counted from the time the head
// queued by its own clock.
func (b *backend) Inspect(ctx context.Context, key string) (core.Info, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	resp, err := b.kv.Txn(ctx).Then(clientv3.OpGet(key), headOp(key)).Commit()
	if err != nil {
		return core.Info{}, err
	}
	kv, _ := rangeKV(resp, 0)
	info := core.Info{Fence: resp.Header.Revision}
	info.Waiters, info.OldestWait = waiters(rangeKV(resp, 1))
	if kv == nil {
		return info, nil
	}
	tok, meta, _ := strings.Cut(string(kv.Value), sep)
	info.Held, info.Token, info.Metadata, info.Fence = true, tok, meta, kv.CreateRevision
	if kv.Lease != 0 {
		r, err := b.lease.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return core.Info{}, err
		}
		if r.TTL < 0 { // expired: etcd is deleting the key
			info.Held, info.Token, info.Metadata = false, "", ""
			return info, nil
		}
		info.TTL = time.Duration(r.TTL) * time.Second
	}
	return info, nil
}

// Close stops the watches and waits for their goroutines.
func (b *backend) Close() error {
	b.mu.Lock()
	b.closed = true
	for _, s := range b.subs {
		s.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
	return nil
}
