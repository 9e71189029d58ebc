package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sub is the watch of one key for its subscriber.
type sub struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned
	prev   *sub          // the previous watch of the key, still ending
	gone   bool          // Unsubscribe was called (guarded by backend.mu)
	poke   chan struct{} // this process's queue of the key changed
}

// kick asks s's goroutine to read its target again.
func (s *sub) kick() {
	select {
	case s.poke <- struct{}{}:
	default: // already asked
	}
}

// A target is what a subscription watches: the deletions of one etcd key
// from a revision on.
//
//   - With no waiter of this process in the key's queue: the lease's key;
//     a deletion (a release, an expiry) wakes one waiter (deliver("")).
//   - With one whose entry is the queue's head: the lease's key; a
//     deletion hands the key to that waiter (deliver(token)).
//   - Otherwise: the entry just ahead of this process's first; its
//     deletion (that waiter took the key, gave up or died) wakes nobody,
//     and the target is read again.
//
// So a release wakes the head's process only, and the head only.
type target struct {
	key   string
	rev   int64
	grant string // the head of the queue, of this process ("": none)
	pred  bool   // key is a queue entry
	now   bool   // the lease's key was free when read: deliver(grant) at once
}

// target reads what key's subscription watches now.
func (b *backend) target(ctx context.Context, key string) (target, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	tok, rev, queued := b.firstLocal(key)
	if !queued {
		resp, err := b.kv.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return target{}, err
		}
		return target{key: key, rev: resp.Header.Revision + 1}, nil
	}
	resp, err := b.kv.Txn(ctx).Then(
		clientv3.OpGet(key, clientv3.WithCountOnly()),
		clientv3.OpGet(queuePrefix(key), append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1), clientv3.WithKeysOnly())...),
	).Commit()
	if err != nil {
		return target{}, err
	}
	next := resp.Header.Revision + 1
	if pred, _ := rangeKV(resp, 1); pred != nil {
		return target{key: string(pred.Key), rev: next, pred: true}, nil
	}
	_, held := rangeKV(resp, 0)
	return target{key: key, rev: next, grant: tok, now: held == 0}, nil
}

// Subscribe watches key from the revision after the current one, so every
// deletion that happens after Subscribe returns — a release, or etcd
// deleting the key when its lease expired — is delivered, even if the
// watch is set up later. With waiters of this process queued, the watch
// follows the queue (see target). The watch requires a leader: a member
// cut off from the cluster ends it, and it is set up again (from the last
// revision seen).
func (b *backend) Subscribe(ctx context.Context, key string, deliver func(string)) error {
	if !b.notify {
		return errors.New("etcdlock: notifications are off (WithNotify(false))")
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	resp, err := b.kv.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("etcdlock: %w", core.ErrClosed)
	}
	prev := b.subs[key]
	if prev != nil && !prev.gone {
		prev.cancel() // replaced: the new watch starts once it has ended
	}
	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	s := &sub{cancel: stop, done: make(chan struct{}), prev: prev, poke: make(chan struct{}, 1)}
	if len(b.queued[key]) > 0 {
		s.kick() // read the queue first thing
	}
	b.subs[key] = s
	b.wg.Add(1)
	go b.watch(wctx, s, key, target{key: key, rev: resp.Header.Revision + 1}, deliver)
	return nil
}

// Unsubscribe stops key's watch without waiting for it (core calls it
// under its own lock, which deliver takes).
func (b *backend) Unsubscribe(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.subs[key]; s != nil && !s.gone {
		s.gone = true
		s.cancel()
	}
}

// Watch retry delays after a watch ended without being stopped.
const (
	rewatchFirst = 50 * time.Millisecond
	rewatchMax   = 2 * time.Second
)

// watch follows key's target t until ctx ends, reading the target again
// when this process's queue changes or the entry watched goes. A new
// watch of the same key waits for the previous one to end first, so
// deliveries for one key never overlap.
func (b *backend) watch(ctx context.Context, s *sub, key string, t target, deliver func(string)) {
	defer b.wg.Done()
	defer func() {
		close(s.done)
		b.mu.Lock()
		if b.subs[key] == s {
			delete(b.subs, key)
		}
		b.mu.Unlock()
	}()
	if s.prev != nil {
		select {
		case <-s.prev.done:
		case <-ctx.Done():
			return
		}
		s.prev = nil
	}
	backoff := rewatchFirst
	for ctx.Err() == nil {
		select {
		case <-s.poke:
			nt, err := b.target(ctx, key)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.kick() // try again after the pause
				b.pause(ctx, &backoff)
				continue
			}
			t = nt
		default:
		}
		if t.now {
			deliver(t.grant)
			t.now = false
		}
		ended := b.follow(ctx, s, &t, deliver)
		if ctx.Err() != nil {
			return
		}
		if !ended {
			backoff = rewatchFirst
			continue // poked, or the entry ahead went: read the target again
		}
		// The watch ended (no leader, compaction): a deletion may have been
		// missed. Waiters ask again; the watch resumes after a pause, and
		// a queue's target is read again (the head's key may be free).
		deliver("")
		b.pause(ctx, &backoff)
		if t.grant != "" || t.pred {
			s.kick()
		}
	}
}

// pause sleeps for *backoff, or until ctx ends, and doubles it.
func (b *backend) pause(ctx context.Context, backoff *time.Duration) {
	t := time.NewTimer(*backoff)
	select {
	case <-ctx.Done():
		t.Stop()
	case <-t.C:
	}
	*backoff = min(2**backoff, rewatchMax)
}

// follow watches t until a poke or a deletion of the entry ahead (ended
// false; s.poke is set so the target is read again), the end of ctx, or
// the end of the watch (ended true, t.rev is where to resume).
func (b *backend) follow(ctx context.Context, s *sub, t *target, deliver func(string)) (ended bool) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	opts := []clientv3.OpOption{clientv3.WithFilterPut()}
	if t.rev > 0 {
		opts = append(opts, clientv3.WithRev(t.rev))
	}
	wch := b.watcher.Watch(wctx, t.key, opts...)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-s.poke:
			s.kick()
			return false
		case resp, ok := <-wch:
			if !ok {
				return true
			}
			if resp.CompactRevision != 0 {
				t.rev = 0 // deletions were compacted away: from now on
			}
			if resp.Err() != nil {
				continue // the channel closes next
			}
			for _, ev := range resp.Events {
				if t.rev != 0 {
					t.rev = ev.Kv.ModRevision + 1
				}
				if ev.Type != mvccpb.DELETE {
					continue
				}
				if t.pred {
					s.kick()
					return false
				}
				deliver(t.grant)
			}
		}
	}
}

// listPage is how many keys one request of ListLeases reads.
const listPage = 256

// ListLeases reads the keys under prefix in key order, listPage at a
// time, each page from the key after the last one read.
func (b *backend) ListLeases(ctx context.Context, prefix string, fn func(string) bool) error {
	start, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	if start == "" {
		start = "\x00"
	}
	for {
		cctx, cancel := b.bound(ctx)
		resp, err := b.kv.Get(cctx, start, clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithLimit(listPage), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		cancel()
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if !strings.HasPrefix(string(kv.Key), prefix) {
				return nil
			}
			if strings.HasPrefix(string(kv.Key), queueRoot) {
				continue // a queue entry, not a lease
			}
			if !fn(string(kv.Key)) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ListRecords lists the records (records.go).
func (b *backend) ListRecords(ctx context.Context, prefix string, fn func(string) bool) error {
	return b.listRecords(ctx, prefix, fn)
}
