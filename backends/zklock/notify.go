package zklock

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// A watcher follows one key for the Client's waiters in this process:
// one goroutine, one ZooKeeper watch at a time. While this process has a
// queued node for the key, it watches that node's predecessor only — a
// release wakes the next in line, not the herd; otherwise it watches the
// holder's node. Whenever the watch fires it lists the key again: if the
// holder it knew is gone, the next node is this process's queued one
// (deliver its token: its turn) or another (deliver "": a release).
type watcher struct {
	stop  chan struct{}
	ready chan struct{} // closed once the first watch is set
}

// subscribeWait bounds how long Subscribe waits for the first watch.
const subscribeWait = 2 * time.Second

func (b *backend) Subscribe(ctx context.Context, key string, deliver func(string)) error {
	b.mu.Lock()
	w := b.watchers[key]
	if w == nil {
		w = &watcher{stop: make(chan struct{}), ready: make(chan struct{})}
		b.watchers[key] = w
		b.wg.Add(1)
		go b.watch(w, b.lockPath(key), deliver)
	}
	b.mu.Unlock()
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return errors.New("zklock: the watch was not set in time")
	}
}

func (b *backend) Unsubscribe(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.watchers[key]; w != nil {
		close(w.stop)
		delete(b.watchers, key)
	}
}

func (b *backend) watch(w *watcher, lock string, deliver func(string)) {
	defer b.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var v view
	readied := false
	backoff := 20 * time.Millisecond
	for {
		ev, err := b.watchOnce(ctx, lock, &v, deliver)
		if err == nil && !readied {
			close(w.ready)
			readied = true
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 20 * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case e := <-ev:
			if e.Err != nil || e.Type == zk.EventNotWatching {
				// The connection closed or the session ended: the watch
				// is gone; look again after a pause.
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
	}
}

// A view is what a watcher saw of its key at its last listing.
type view struct {
	known    bool   // there was a listing
	holder   string // the lowest node then ("" none)
	exists   bool   // the lock node existed
	czxid    int64  // its czxid
	cversion int32  // its count of child creations and deletions
	children int32  // its number of children
}

// released reports whether a listing (kids, and the lock node's stat, nil
// if it is gone) shows a release since v: a node was deleted and the
// holder changed, or the key is free.
func (v view) released(kids []child, stat *zk.Stat) bool {
	if !v.known {
		return false
	}
	lowest := ""
	if len(kids) > 0 {
		lowest = kids[0].path
	}
	var deleted bool
	switch {
	case stat == nil:
		deleted = v.exists // removed by the server once empty
	case !v.exists || stat.Czxid != v.czxid: // created anew since
		deleted = stat.Cversion > stat.NumChildren
	default: // creations and deletions since, less the creations
		deleted = stat.Cversion-v.cversion > stat.NumChildren-v.children
	}
	return deleted && (lowest != v.holder || lowest == "")
}

// watchOnce lists lock, delivers a release seen since the last listing
// (to this process's queued node now first, by its token, else to any
// waiter), and sets the next watch.
func (b *backend) watchOnce(ctx context.Context, lock string, v *view, deliver func(string)) (<-chan zk.Event, error) {
	kids, stat, err := b.children(ctx, lock)
	if err != nil {
		return nil, err
	}
	lowest := ""
	if len(kids) > 0 {
		lowest = kids[0].path
	}
	if v.released(kids, stat) {
		tok := ""
		if lowest != "" {
			tok = b.s.queuedToken(lowest)
		}
		deliver(tok)
	}
	*v = view{known: true, holder: lowest, exists: stat != nil}
	if stat != nil {
		v.czxid, v.cversion, v.children = stat.Czxid, stat.Cversion, stat.NumChildren
	}
	type res struct {
		ok bool
		ch <-chan zk.Event
	}
	var r res
	switch {
	case len(kids) == 0:
		// Free: learn of the next contender (then of its release).
		r, err = call(ctx, func() (res, error) {
			_, _, ch, err := b.conn.ChildrenW(lock)
			return res{true, ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			r, err = call(ctx, func() (res, error) {
				ok, _, ch, err := b.conn.ExistsW(lock)
				return res{!ok, ch}, err // ok: created meanwhile, look again
			})
		}
	default:
		target := lowest
		if q := b.s.queuedHead(kids); q != "" {
			target = kids[findPath(kids, q)-1].path // its predecessor
		}
		// GetW, not ExistsW: a watch on a node already gone is not set
		// (ExistsW would leave one for a creation that never comes).
		r, err = call(ctx, func() (res, error) {
			_, _, ch, err := b.conn.GetW(target)
			if errors.Is(err, zk.ErrNoNode) {
				return res{false, nil}, nil
			}
			return res{true, ch}, err
		})
	}
	if err != nil {
		return nil, err
	}
	if !r.ok { // changed already: fire at once
		ch := make(chan zk.Event, 1)
		ch <- zk.Event{Type: zk.EventNodeDeleted}
		return ch, nil
	}
	return r.ch, nil
}
