package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/core"
)

// New returns a core.Client whose leases are ephemeral sequential znodes
// in conn's session. WithSessionTimeout is required: pass the timeout
// conn was connected with. The Client declares core.CapFair and
// core.CapNotify (WithFair serves waiters in arrival order, and a release
// wakes the next waiter through a watch on its predecessor) and
// core.CapClaims (records and claims, which cronlock needs, judged by the
// time ZooKeeper stamps on writes: see the package documentation); it has
// no listing, semaphores or read-write locks. Its default
// TTL is core.DefaultTTL or, if shorter, what the session vouches for
// (two thirds of its timeout); a longer TTL is refused when a lock is
// taken. The error is core.ErrInvalidOption for a nil conn or a bad
// option. Closing the Client stops the backend's watches; it does not
// close conn (closing conn ends the session, and every lease in it).
func New(conn *zk.Conn, opts ...Option) (*core.Client, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zklock: nil *zk.Conn", core.ErrInvalidOption)
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	vouch := (cfg.session * 2 / 3).Truncate(time.Millisecond)
	b := &backend{conn: conn, root: cfg.root, acl: cfg.acl, vouch: vouch, watchers: map[string]*watcher{}}
	b.rs.every, b.rs.stop = cfg.sweepEvery, make(chan struct{})
	copts := append([]core.Option{core.WithTTL(min(core.DefaultTTL, vouch))}, cfg.core...)
	b.s = openSession(conn)
	c, err := core.New(b, copts...)
	if err != nil {
		b.s.release()
		return nil, err
	}
	return c, nil
}

// backend implements core.Backend on ZooKeeper.
type backend struct {
	conn  *zk.Conn
	s     *session
	root  string
	acl   []zk.ACL
	vouch time.Duration // the longest lease the session vouches for

	mu        sync.Mutex
	watchers  map[string]*watcher
	wg        sync.WaitGroup
	closeOnce sync.Once

	rs recState // records (records.go)
}

var (
	_ core.Backend     = (*backend)(nil)
	_ core.Notifier    = (*backend)(nil)
	_ core.RecordStore = (*backend)(nil)
)

func (b *backend) Capabilities() core.Capability {
	return core.CapFair | core.CapNotify | core.CapClaims
}

// errForeign: the token's node lives in another session.
var errForeign = errors.New("zklock: the lease of this token lives in another ZooKeeper session, which this one cannot vouch for")

func (b *backend) checkTTL(ttl time.Duration) error {
	if ttl > b.vouch {
		return fmt.Errorf("%w: zklock: %v is longer than the session vouches for (%v, two thirds of its timeout)", core.ErrInvalidTTL, ttl, b.vouch)
	}
	return nil
}

// lockPath is the container znode of a lease name: the name with '%',
// '/', a leading '.' and every byte outside printable ASCII escaped as %XX.
func (b *backend) lockPath(key string) string { return escapedPath(b.root, key) }

// escapedPath is the znode under dir named after key, escaped as lockPath
// says.
func escapedPath(dir, key string) string {
	var sb strings.Builder
	sb.Grow(len(dir) + 1 + len(key))
	sb.WriteString(dir)
	sb.WriteByte('/')
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c <= ' ' || c >= 0x7f || c == '/' || c == '%' || (i == 0 && c == '.') {
			fmt.Fprintf(&sb, "%%%02X", c)
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// A child is one contender's node: "<token>-<sequence>".
type child struct {
	path, token string
	seq         int64
}

// children lists lock's contenders in sequence order (none if lock does
// not exist), with lock's Stat (nil then).
func (b *backend) children(ctx context.Context, lock string) ([]child, *zk.Stat, error) {
	type res struct {
		names []string
		stat  *zk.Stat
	}
	r, err := call(ctx, func() (res, error) {
		names, stat, err := b.conn.Children(lock)
		return res{names, stat}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("zklock: list %s: %w", lock, err)
	}
	kids := make([]child, 0, len(r.names))
	for _, name := range r.names {
		if c, ok := parseChild(lock, name); ok {
			kids = append(kids, c)
		}
	}
	slices.SortFunc(kids, func(a, b child) int { return int(a.seq - b.seq) })
	return kids, r.stat, nil
}

func parseChild(lock, name string) (child, bool) {
	const digits = 10
	n := len(name)
	if n < digits+2 || name[n-digits-1] != '-' {
		return child{}, false
	}
	seq, err := strconv.ParseInt(name[n-digits:], 10, 64)
	if err != nil {
		return child{}, false
	}
	return child{path: lock + "/" + name, token: name[:n-digits-1], seq: seq}, true
}

func findToken(kids []child, token string) int {
	return slices.IndexFunc(kids, func(c child) bool { return c.token == token })
}

func findPath(kids []child, path string) int {
	return slices.IndexFunc(kids, func(c child) bool { return c.path == path })
}

func (b *backend) get(ctx context.Context, path string) ([]byte, *zk.Stat, error) {
	type res struct {
		data []byte
		stat *zk.Stat
	}
	r, err := call(ctx, func() (res, error) {
		data, stat, err := b.conn.Get(path)
		return res{data, stat}, err
	})
	return r.data, r.stat, err
}

func (b *backend) delete(ctx context.Context, path string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(path, -1) })
	return err
}

// sync makes the connected server catch up with the leader, so that a
// read that follows reflects every write committed before it.
func (b *backend) sync(ctx context.Context, path string) error {
	_, err := call(ctx, func() (string, error) { return b.conn.Sync(path) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zklock: sync: %w", err)
	}
	return nil
}

func (b *backend) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if err := b.checkTTL(req.TTL); err != nil {
		return core.AcquireResult{}, err
	}
	lock := b.lockPath(req.Key)
	kids, _, err := b.children(ctx, lock)
	if err != nil {
		return core.AcquireResult{}, err
	}
	if i := findToken(kids, req.Token); i >= 0 {
		r, done, err := b.again(ctx, lock, req, kids, i)
		if done || err != nil {
			return r, err
		}
		if kids, _, err = b.children(ctx, lock); err != nil {
			return core.AcquireResult{}, err
		}
	}
	if len(kids) > 0 && !req.Enqueue {
		// Held, or a queue this caller may not jump, and it is not to
		// join the queue (a TryLock, or not fair).
		return core.AcquireResult{HolderTTL: b.s.holderTTL(kids[0].path, time.Now())}, nil
	}
	path, err := b.create(ctx, lock, req)
	if err != nil {
		return core.AcquireResult{}, err
	}
	sid := b.conn.SessionID()
	// Read-your-writes: the server that created the node has every node
	// created before it, so a lower node missing here was deleted.
	if kids, _, err = b.children(ctx, lock); err != nil {
		b.abandon(path, sid, req)
		return core.AcquireResult{}, err
	}
	switch i := findPath(kids, path); {
	case i == 0:
		r, err := b.claim(ctx, path, req)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			// The node this call made is the lease, and the call failed
			// before the lease was recorded: nobody would release it
			// (core takes a failed attempt's lease back only under a
			// token of its own). The reaper takes it (review 11).
			b.abandon(path, sid, req)
		}
		return r, err
	case i < 0:
		return core.AcquireResult{}, fmt.Errorf("zklock: node %s vanished as it was created (session expired?)", path)
	case req.Enqueue:
		b.s.put(&entry{key: req.Key, token: req.Token, path: path, sid: sid, meta: req.Metadata, asked: time.Now()})
		return core.AcquireResult{Queued: true, HolderTTL: b.s.holderTTL(kids[0].path, time.Now())}, nil
	}
	holderTTL := b.s.holderTTL(kids[0].path, time.Now())
	if err := b.delete(context.WithoutCancel(ctx), path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		b.abandon(path, sid, req)
	}
	return core.AcquireResult{HolderTTL: holderTTL}, nil
}

// abandon hands a node this process no longer wants to the reaper.
func (b *backend) abandon(path string, sid int64, req core.AcquireRequest) {
	b.s.put(&entry{key: req.Key, token: req.Token, path: path, sid: sid, dead: true, held: true, deadline: time.Now()})
}

// again serves an Acquire whose token already has a node at kids[i]:
// re-entry, a queued waiter asking again, or its turn come. done is false
// if the node turned out gone, or was a leftover deleted here: the caller
// then goes on as if there had been none.
func (b *backend) again(ctx context.Context, lock string, req core.AcquireRequest, kids []child, i int) (core.AcquireResult, bool, error) {
	path := kids[i].path
	if b.s.isDead(path) { // given up by the reaper: never revived
		if err := b.delete(ctx, path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return core.AcquireResult{}, true, fmt.Errorf("zklock: delete %s: %w", path, err)
		}
		b.s.drop(path)
		return core.AcquireResult{}, false, nil
	}
	e := b.s.lookup(req.Key, req.Token)
	if i > 0 && e != nil && !e.held && e.path == path {
		// Still queued (a stale view can only show more nodes ahead, never
		// fewer): no need to reach the leader.
		if req.Fair {
			e.asked = time.Now()
			b.s.put(e)
		}
		return core.AcquireResult{Queued: req.Fair, HolderTTL: b.s.holderTTL(kids[0].path, time.Now())}, true, nil
	}
	// Its turn, a re-entry, or a node this process does not know: decide
	// on the leader's state, since the node may be gone with its session.
	if err := b.sync(ctx, lock); err != nil {
		return core.AcquireResult{}, true, err
	}
	kids, _, err := b.children(ctx, lock)
	if err != nil {
		return core.AcquireResult{}, true, err
	}
	switch j := findPath(kids, path); {
	case j < 0:
		b.s.drop(path)
		return core.AcquireResult{}, false, nil
	case j == 0:
		r, err := b.claim(ctx, path, req)
		if errors.Is(err, zk.ErrNoNode) {
			return core.AcquireResult{}, false, nil
		}
		return r, true, err
	}
	holderTTL := b.s.holderTTL(kids[0].path, time.Now())
	if e == nil || e.path != path {
		// A queued node of the token that this process does not know:
		// its own (a fair waiter's whose entry is gone, or a leftover)
		// only if this session made it. Another session's is another
		// process's, under a token shared with WithToken: it is never
		// adopted nor deleted here, and this caller is neither served
		// nor queued (as first built, it was taken for a leftover and
		// deleted, or adopted as this process's queued node — and then
		// deleted as this process's waiter gave up, when its owner may
		// hold the lease by then).
		mine, err := b.owns(ctx, path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			b.s.drop(path)
			return core.AcquireResult{}, false, nil
		case err != nil:
			return core.AcquireResult{}, true, err
		case !mine:
			return core.AcquireResult{HolderTTL: holderTTL}, true, nil
		}
	}
	switch {
	case req.Fair:
		if e == nil || e.path != path {
			e = &entry{key: req.Key, token: req.Token, path: path, sid: b.conn.SessionID(), meta: req.Metadata}
		}
		e.asked = time.Now()
		b.s.put(e)
		return core.AcquireResult{Queued: true, HolderTTL: holderTTL}, true, nil
	case e == nil:
		// A leftover of an attempt of this session that failed, not a
		// fair waiter of this process: not acquired, and it leaves
		// nothing behind.
		if err := b.delete(ctx, path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return core.AcquireResult{}, true, fmt.Errorf("zklock: delete %s: %w", path, err)
		}
		b.s.drop(path)
	}
	return core.AcquireResult{HolderTTL: holderTTL}, true, nil
}

// owns reports whether this session made the node at path (an ephemeral
// node never changes owner). zk.ErrNoNode if it is gone.
func (b *backend) owns(ctx context.Context, path string) (bool, error) {
	_, stat, err := b.get(ctx, path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, err
	case err != nil:
		return false, fmt.Errorf("zklock: read %s: %w", path, err)
	}
	return stat.EphemeralOwner == b.conn.SessionID(), nil
}

// claim takes the lease of path, the lowest node, for req: a new
// acquisition, a queued waiter's turn, or a re-entry (the fence and a
// later deadline are kept).
func (b *backend) claim(ctx context.Context, path string, req core.AcquireRequest) (core.AcquireResult, error) {
	data, stat, err := b.get(ctx, path)
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			b.s.drop(path)
			return core.AcquireResult{}, err
		}
		return core.AcquireResult{}, fmt.Errorf("zklock: read %s: %w", path, err)
	}
	if stat.EphemeralOwner != b.conn.SessionID() {
		return core.AcquireResult{}, errForeign
	}
	if string(data) != req.Metadata {
		if _, err := call(ctx, func() (*zk.Stat, error) { return b.conn.Set(path, []byte(req.Metadata), -1) }); err != nil {
			return core.AcquireResult{}, fmt.Errorf("zklock: set metadata of %s: %w", path, err)
		}
	}
	deadline := time.Now().Add(req.TTL)
	if e := b.s.lookup(req.Key, req.Token); e != nil && e.held && e.path == path && e.deadline.After(deadline) {
		deadline = e.deadline // re-entry never shortens
	}
	b.s.put(&entry{
		key: req.Key, token: req.Token, path: path, sid: stat.EphemeralOwner,
		held: true, fence: stat.Czxid, meta: req.Metadata, deadline: deadline,
	})
	return core.AcquireResult{Acquired: true, Fence: stat.Czxid}, nil
}

// create adds req's node under lock, creating lock (a container, which
// the server deletes once empty) and the root as needed. If ctx ends
// before the answer, a node created after all is deleted when the answer
// comes.
func (b *backend) create(ctx context.Context, lock string, req core.AcquireRequest) (string, error) {
	for attempt := 0; ; attempt++ {
		path, err := b.createOnce(ctx, lock+"/"+req.Token+"-", []byte(req.Metadata))
		if !errors.Is(err, zk.ErrNoNode) || attempt == 3 {
			if err != nil {
				return "", fmt.Errorf("zklock: create under %s: %w", lock, err)
			}
			return path, nil
		}
		if err := b.ensure(ctx, lock); err != nil {
			return "", err
		}
	}
}

func (b *backend) createOnce(ctx context.Context, prefix string, data []byte) (string, error) {
	type res struct {
		path string
		err  error
	}
	ch := make(chan res, 1)
	var mu sync.Mutex
	abandoned := false
	go func() {
		p, err := b.conn.Create(prefix, data, zk.FlagEphemeralSequential, b.acl)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if err == nil {
				_ = b.conn.Delete(p, -1)
			}
			return
		}
		ch <- res{p, err}
	}()
	select {
	case r := <-ch:
		return r.path, r.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-ch:
			return r.path, r.err
		default:
			abandoned = true
			return "", context.Cause(ctx)
		}
	}
}

// ensure creates lock as a container, and the root's path before it.
func (b *backend) ensure(ctx context.Context, lock string) error {
	mk := func(path string, flags int32) error {
		_, err := call(ctx, func() (string, error) {
			if flags == zk.FlagContainer {
				return b.conn.CreateContainer(path, nil, flags, b.acl)
			}
			return b.conn.Create(path, nil, flags, b.acl)
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		return nil
	}
	err := mk(lock, zk.FlagContainer)
	if !errors.Is(err, zk.ErrNoNode) {
		return wrapErr("create "+lock, err)
	}
	for i := 1; i <= len(b.root); i++ {
		if i == len(b.root) || b.root[i] == '/' {
			if err := mk(b.root[:i], zk.FlagPersistent); err != nil {
				return wrapErr("create "+b.root[:i], err)
			}
		}
	}
	return wrapErr("create "+lock, mk(lock, zk.FlagContainer))
}

func wrapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("zklock: %s: %w", what, err)
}

func (b *backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	if err := b.checkTTL(ttl); err != nil {
		return 0, err
	}
	e := b.s.lookup(key, token)
	if e == nil || !e.held {
		return 0, core.ErrNotHeld
	}
	if e.sid != b.conn.SessionID() { // that session is over, and its nodes with it
		b.s.drop(e.path)
		return 0, core.ErrNotHeld
	}
	// A read that reflects the leader's state as of a moment after this
	// call began: the node, and so the session, was alive then.
	if err := b.sync(ctx, e.path); err != nil {
		return 0, err
	}
	type res struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := call(ctx, func() (res, error) {
		ok, stat, err := b.conn.Exists(e.path)
		return res{ok, stat}, err
	})
	if err != nil {
		return 0, fmt.Errorf("zklock: read %s: %w", e.path, err)
	}
	if !r.ok || r.stat.EphemeralOwner != e.sid {
		b.s.drop(e.path)
		return 0, core.ErrNotHeld
	}
	now := time.Now()
	deadline, ok := b.s.extend(e.path, now, ttl)
	if !ok {
		return 0, core.ErrNotHeld
	}
	// The session cannot expire sooner than vouch after this call began
	// (see the package documentation), nor does the reaper delete the node
	// before deadline; the Client counts left from before the call.
	return min(deadline.Sub(now), b.vouch), nil
}

func (b *backend) Release(ctx context.Context, key, token string) (bool, error) {
	path, held := "", false
	if e := b.s.lookup(key, token); e != nil {
		path, held = e.path, e.held
	} else {
		kids, _, err := b.children(ctx, b.lockPath(key))
		if err != nil {
			return false, err
		}
		i := findToken(kids, token)
		if i < 0 {
			return false, nil
		}
		path, held = kids[i].path, i == 0 && !b.s.isDead(kids[i].path)
		// Only a node of this session: another session's node under the
		// token is another process's lease or place (WithToken), never
		// released from here.
		switch mine, err := b.owns(ctx, path); {
		case errors.Is(err, zk.ErrNoNode):
			return false, nil
		case err != nil:
			return false, err
		case !mine:
			return false, nil
		}
	}
	err := b.delete(ctx, path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		b.s.drop(path)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("zklock: delete %s: %w", path, err)
	}
	b.s.drop(path)
	return held, nil
}

func (b *backend) Inspect(ctx context.Context, key string) (core.Info, error) {
	lock := b.lockPath(key)
	for range 3 {
		kids, stat, err := b.children(ctx, lock)
		if err != nil {
			return core.Info{}, err
		}
		if len(kids) == 0 {
			return b.inspectFree(ctx, stat)
		}
		data, hs, err := b.get(ctx, kids[0].path)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile: look again
		}
		if err != nil {
			return core.Info{}, fmt.Errorf("zklock: read %s: %w", kids[0].path, err)
		}
		now := time.Now()
		info := core.Info{
			Held: true, Token: kids[0].token, Metadata: string(data), Fence: hs.Czxid,
			TTL: b.s.holderTTL(kids[0].path, now), Waiters: len(kids) - 1,
		}
		if len(kids) > 1 {
			if _, ws, err := b.get(ctx, kids[1].path); err == nil {
				info.OldestWait = max(now.Sub(time.UnixMilli(ws.Ctime)), 0)
			}
		}
		return info, nil
	}
	return core.Info{}, fmt.Errorf("zklock: inspect %s: the holder kept changing", lock)
}

// inspectFree reports a free key's fence: the lock node's pzxid (the zxid
// of its last child's deletion), or the root's once the server removed the
// empty lock node — at least the last fence issued, below the next.
func (b *backend) inspectFree(ctx context.Context, stat *zk.Stat) (core.Info, error) {
	if stat != nil {
		return core.Info{Fence: stat.Pzxid}, nil
	}
	type res struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := call(ctx, func() (res, error) {
		ok, st, err := b.conn.Exists(b.root)
		return res{ok, st}, err
	})
	if err != nil {
		return core.Info{}, fmt.Errorf("zklock: read %s: %w", b.root, err)
	}
	if !r.ok {
		return core.Info{}, nil
	}
	return core.Info{Fence: r.stat.Pzxid}, nil
}

func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		for key, w := range b.watchers {
			close(w.stop)
			delete(b.watchers, key)
		}
		b.mu.Unlock()
		b.wg.Wait()
		b.closeRecords()
		b.s.release()
	})
	return nil
}

// call runs f, returning early (with ctx's cause) if ctx ends first; f
// then finishes on its own (the client library fails every request of a
// connection it loses or closes).
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	var zero T
	if ctx.Err() != nil {
		return zero, context.Cause(ctx)
	}
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}
