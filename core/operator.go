package core

import (
	"context"
	"crypto/rand"
	"fmt"
	"iter"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The operator's view of a Client's keys: Scan lists what is held, Evict
// takes it away. Both are for tools (cmd/latchkey, an admin page), not for
// the lock's users: a lock is never taken over by its own callers this way.

// A scanner is a backend that can list its storage names.
type scanner interface {
	// scanNames calls fn with every storage name matching the Redis glob
	// pattern (every master of a Cluster, every Redlock node: a name may
	// come more than once), until fn returns false.
	scanNames(ctx context.Context, pattern string, fn func(name string) bool) error
}

// An evicter is a backend that can remove the holds of a key an operator
// saw.
type evicter interface {
	// evict removes the holds of want still held by their tokens, and
	// returns them ("<kind>:<token>" each).
	evict(ctx context.Context, mutex, sem, rw names, want evictWant) ([]string, error)
}

// evictWant are the holds Evict saw and may take away.
type evictWant struct {
	nonce string   // unique to the Evict call: a run of it sent again answers as the first
	holds []string // the lock's lease (or grant) and the other holds, "<kind>:<fence>:<token>" each
}

// evictName names a hold for evict: "<kind>:<fence>:<token>".
func evictName(kind Kind, fence int64, token string) string {
	return string(kind) + ":" + strconv.FormatInt(fence, 10) + ":" + token
}

// args are evict.lua's ARGV from its second on.
func (w evictWant) args() []any {
	a := make([]any, 0, 1+len(w.holds))
	a = append(a, w.nonce)
	for _, h := range w.holds {
		a = append(a, h)
	}
	return a
}

// Scan lists the keys under the Client's prefix that are held now, as
// Inspect describes them, one Info per primitive of a key: its lock (Held,
// Token, Metadata, Fence, TTL, Waiters, OldestWait; Holds empty), its
// semaphore (Holds of kind permit, PermitWaiters, PermitOldestWait) or its
// read-write lock (Holds of kinds read and write, WritersWaiting,
// WriterOldestWait). A key used as a lock and a semaphore comes twice.
// match is a path.Match pattern for the keys ("" or "*": all keys, those
// with a '/' too; in any other pattern '*' stops at '/', as path.Match's
// does; a bad pattern is ErrInvalidOption). Keys are read as the scan finds them
// (SCAN on every master of a Cluster), so memory stays flat however many
// there are; a key taken or given up while the scan runs may come or not,
// as with SCAN. On Redlock every node is scanned, and the keys seen are
// remembered to list each once. A backend failure is yielded as an
// ErrUnavailable error, and ends the scan.
func (c *Client) Scan(ctx context.Context, match string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		all := match == "" || match == "*"
		if _, err := path.Match(match, ""); err != nil {
			yield(Info{}, fmt.Errorf("%w: match %q: %w", ErrInvalidOption, match, err))
			return
		}
		sc, ok := c.be.(scanner)
		if !ok || c.caps&CapList == 0 {
			yield(Info{}, unsupported("listing keys", CapList))
			return
		}
		var seen map[string]bool // Redlock: a name is on several nodes
		if _, redlock := c.be.(*redlockBackend); redlock {
			seen = map[string]bool{}
		}
		var failed error
		err := sc.scanNames(ctx, globEscape(c.cfg.prefix)+":{*", func(name string) bool {
			key, anchor, ok := c.parseName(name)
			if !ok {
				return true
			}
			if m, _ := path.Match(match, key); !m && !all {
				return true
			}
			if seen != nil {
				if seen[name] {
					return true
				}
				seen[name] = true
			}
			info, err := c.Inspect(ctx, key)
			if err != nil {
				failed = err
				return false
			}
			if info, ok := info.only(anchor); ok {
				return yield(info, nil)
			}
			return true
		})
		switch {
		case failed != nil:
			yield(Info{}, failed)
		case err != nil:
			yield(Info{}, fmt.Errorf("%w: scan: %w", ErrUnavailable, err))
		}
	}
}

// parseName finds the key of a storage name and which primitive it
// anchors: "<prefix>:{<key>}" a lock's lease (KindLock), "…}:sem" a
// semaphore's permits (KindPermit), "…}:rw" a write hold (KindWrite),
// "…}:rw:r" read holds (KindRead). Other names (fences, queues, values,
// records) anchor nothing.
func (c *Client) parseName(name string) (key string, anchor Kind, ok bool) {
	rest, ok := strings.CutPrefix(name, c.cfg.prefix+":{")
	if !ok {
		return "", "", false
	}
	for _, a := range []struct {
		suffix string
		kind   Kind
	}{{"}:rw:r", KindRead}, {"}:rw", KindWrite}, {"}:sem", KindPermit}, {"}", KindLock}} {
		if key, ok := strings.CutSuffix(rest, a.suffix); ok && key != "" && validKey(key) == nil {
			return key, a.kind, true
		}
	}
	return "", "", false
}

// only restricts info to the primitive anchor names, and reports whether
// that primitive is held.
func (info Info) only(anchor Kind) (Info, bool) {
	out := Info{Key: info.Key}
	switch anchor {
	case KindLock:
		out.Held, out.Token, out.Metadata, out.Fence, out.TTL, out.Waiters, out.OldestWait, out.granted =
			info.Held, info.Token, info.Metadata, info.Fence, info.TTL, info.Waiters, info.OldestWait, info.granted
		return out, out.Held
	case KindPermit:
		for _, h := range info.Holds {
			if h.Kind == KindPermit {
				out.Holds = append(out.Holds, h)
			}
		}
		out.PermitWaiters, out.PermitOldestWait = info.PermitWaiters, info.PermitOldestWait
	default: // the read-write lock, once: under its writer, or its readers when no writer holds
		for _, h := range info.Holds {
			switch h.Kind {
			case KindWrite:
				if anchor == KindRead {
					return Info{}, false // listed under the writer's name
				}
				out.Holds = append(out.Holds, h)
			case KindRead:
				out.Holds = append(out.Holds, h)
			}
		}
		out.WritersWaiting, out.WriterOldestWait = info.WritersWaiting, info.WriterOldestWait
	}
	return out, len(out.Holds) > 0
}

// globEscape escapes the Redis glob characters of s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Evict takes every hold of key away — its lock's lease, its semaphore's
// permits, its read-write lock's holds — for an operator whose holder is
// stuck. It raises the fence of each primitive that had holders, so that
// storage which checks fences rejects the evicted holders' late writes as
// it would a deposed holder's, and wakes the waiters. A holder is told
// (Lost closes, Do's context is cancelled) when its next renewal finds its
// hold gone: within a third of its TTL if it renews, and its late writes
// are fenced out meanwhile.
//
// Evict takes the holds Inspect shows just before it, and only those (by
// token and fence): a hold taken after that look — the next holder of a
// key its stuck holder gave up meanwhile, or a new acquisition under the
// same token — is left be, and Evict returns the holds it took, as
// Inspect showed them. Given tokens (those an operator confirmed), it
// takes only the holds of those tokens. A key none of whose holds it may
// take is still held (none, or all given up since) is ErrNotHeld, and
// nothing changes. On Redis, an eviction sent again by go-redis after its
// answer was lost answers as the first run did and takes nothing more.
func (c *Client) Evict(ctx context.Context, key string, tokens ...string) (Info, error) {
	info, err := c.Inspect(ctx, key)
	if err != nil {
		return Info{}, err
	}
	ev, ok := c.be.(evicter)
	if !ok {
		return Info{}, fmt.Errorf("%w: %w: this backend cannot evict", ErrInvalidOption, ErrUnsupported)
	}
	may := func(token string) bool { return len(tokens) == 0 || slices.Contains(tokens, token) }
	want := evictWant{nonce: rand.Text()}
	if info.Held && may(info.Token) {
		want.holds = append(want.holds, evictName(KindLock, info.Fence, info.Token))
	}
	for _, h := range info.Holds {
		if may(h.Token) {
			want.holds = append(want.holds, evictName(h.Kind, h.Fence, h.Token))
		}
	}
	if len(want.holds) == 0 {
		if len(tokens) > 0 && (info.Held || len(info.Holds) > 0) {
			return Info{}, fmt.Errorf("%w: %q: none of the tokens given holds it", ErrNotHeld, key)
		}
		return Info{}, fmt.Errorf("%w: %q: nothing holds it", ErrNotHeld, key)
	}
	removed, err := ev.evict(ctx, c.names(key), c.semNames(key, 1), c.kindNames(key, rwWrite), want)
	if err != nil {
		return Info{}, fmt.Errorf("%w: evict %q: %w", ErrUnavailable, key, err)
	}
	if len(removed) == 0 {
		return Info{}, fmt.Errorf("%w: %q: nothing it saw holds it still", ErrNotHeld, key)
	}
	return info.taken(removed), nil
}

// taken restricts info to the holds removed (evictName each).
func (info Info) taken(removed []string) Info {
	if info.Held && !slices.Contains(removed, evictName(KindLock, info.Fence, info.Token)) {
		info.Held, info.Token, info.Metadata, info.TTL, info.granted = false, "", "", 0, false
	}
	holds := info.Holds[:0:0]
	for _, h := range info.Holds {
		if slices.Contains(removed, evictName(h.Kind, h.Fence, h.Token)) {
			holds = append(holds, h)
		}
	}
	info.Holds = holds
	return info
}

func (b *redisBackend) scanNames(ctx context.Context, pattern string, fn func(string) bool) error {
	var servers []redis.Cmdable
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			servers = append(servers, m)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return err
		}
	} else {
		servers = []redis.Cmdable{b.rdb}
	}
	for _, s := range servers { // one at a time: fn is called serially
		it := s.Scan(ctx, 0, pattern, 500).Iterator()
		for it.Next(ctx) {
			if !fn(it.Val()) {
				return nil
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (b *redisBackend) evict(ctx context.Context, mutex, sem, rw names, want evictWant) ([]string, error) {
	args := append([]any{retentionArg}, want.args()...)
	return b.pubs.evict.Run(ctx, b.rdb, []string{mutex.lease, mutex.fence, sem.lease, sem.vals, sem.fence,
		rw.lease, rw.readers, rw.vals, rw.fence, mutex.lease + ":ev:" + want.nonce}, args...).StringSlice()
}

func (b *redlockBackend) scanNames(ctx context.Context, pattern string, fn func(string) bool) error {
	stopped := false
	for _, n := range b.nodes {
		err := n.scanNames(ctx, pattern, func(name string) bool {
			stopped = !fn(name)
			return !stopped
		})
		if err != nil {
			return err
		}
		if stopped {
			return nil
		}
	}
	return nil
}

// evict removes the holds from every node that answers; a majority must.
// It returns the holds any node removed.
func (b *redlockBackend) evict(ctx context.Context, mutex, sem, rw names, want evictWant) ([]string, error) {
	var mu sync.Mutex
	var removed []string
	answered := 0
	var failed []nodeReply
	unanswered := b.fanout(ctx, time.Second, func(ctx context.Context, i int) nodeReply {
		r, err := b.nodes[i].evict(ctx, mutex, sem, rw, want)
		mu.Lock()
		for _, h := range r {
			if !slices.Contains(removed, h) {
				removed = append(removed, h)
			}
		}
		mu.Unlock()
		return nodeReply{err: err}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
		} else {
			answered++
		}
		return false
	})
	if answered < b.quorum {
		return nil, b.quorumError("evict", answered, append(failed, unanswered...))
	}
	mu.Lock()
	defer mu.Unlock()
	return removed, nil
}

func (m *memoryBackend) scanNames(_ context.Context, _ string, fn func(string) bool) error {
	m.mu.Lock()
	now := time.Now()
	names := make([]string, 0, len(m.leases)+len(m.sems))
	for name, ml := range m.leases {
		if now.Before(ml.expires) { // an expired lease or record is gone
			names = append(names, name)
		}
	}
	for name := range m.sems {
		names = append(names, name)
	}
	m.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		if !fn(name) {
			return nil
		}
	}
	return nil
}

func (m *memoryBackend) evict(_ context.Context, mutex, sem, rw names, want evictWant) ([]string, error) {
	m.mu.Lock()
	now := time.Now()
	var removed, woken []string
	permits, rwTaken := false, false
	for _, h := range want.holds {
		kind, rest, _ := strings.Cut(h, ":")
		fs, tok, _ := strings.Cut(rest, ":")
		f, _ := strconv.ParseInt(fs, 10, 64)
		switch Kind(kind) {
		case KindLock:
			if ml, ok := m.live(mutex.lease, now); ok && owns(ml.value, tok) && m.fences[mutex.fence] <= f {
				delete(m.leases, mutex.lease)
				m.fences[mutex.fence]++
				removed = append(removed, h)
				woken = append(woken, mutex.lease)
			}
		case KindPermit:
			if p, ok := m.permits(sem, now)[tok]; ok && p.fence == f {
				delete(m.sems[sem.lease], tok)
				permits = true
				removed = append(removed, h)
			}
		case KindWrite:
			if ml, ok := m.live(rw.lease, now); ok && owns(ml.value, tok) && m.fences[rw.fence] <= f {
				delete(m.leases, rw.lease)
				rwTaken = true
				removed = append(removed, h)
			}
		case KindRead:
			if p, ok := m.permits(readerNames(rw), now)[tok]; ok && p.fence == f {
				delete(m.sems[rw.readers], tok)
				rwTaken = true
				removed = append(removed, h)
			}
		}
	}
	if permits {
		m.fences[sem.fence]++
		woken = append(woken, sem.lease)
	}
	if rwTaken {
		m.fences[rw.fence]++
		woken = append(woken, rw.lease)
	}
	m.mu.Unlock()
	for _, ch := range woken {
		m.nt.deliver(ch, "r:")
	}
	return removed, nil
}
