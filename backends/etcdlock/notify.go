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
}

// Subscribe watches key from the revision after the current one, so every
// deletion that happens after Subscribe returns — a release, or etcd
// deleting the key when its lease expired — is delivered, even if the
// watch is set up later. The watch requires a leader: a member cut off from
// the cluster ends it, and it is set up again (from the last revision
// seen).
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
	s := &sub{cancel: stop, done: make(chan struct{}), prev: prev}
	b.subs[key] = s
	b.wg.Add(1)
	go b.watch(wctx, s, key, resp.Header.Revision+1, deliver)
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

// watch delivers key's deletions from revision rev until ctx ends. A new
// watch of the same key waits for the previous one to end first, so
// deliveries for one key never overlap.
func (b *backend) watch(ctx context.Context, s *sub, key string, rev int64, deliver func(string)) {
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
		opts := []clientv3.OpOption{clientv3.WithFilterPut()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		for resp := range b.watcher.Watch(ctx, key, opts...) {
			if resp.CompactRevision != 0 {
				rev = 0 // deletions were compacted away: from now on
			}
			if resp.Err() != nil {
				continue // the channel closes next
			}
			backoff = rewatchFirst
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					deliver("")
				}
				if rev != 0 {
					rev = ev.Kv.ModRevision + 1
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (no leader, compaction): a deletion may have been
		// missed. Waiters ask again; the watch resumes after a pause.
		deliver("")
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, rewatchMax)
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
