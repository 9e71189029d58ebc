package memcachelock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/latchkey/latchkey/core"
)

// tickSlack is what is added to a TTL before it is rounded up to the whole
// seconds memcached is given. memcached keeps time as a seconds counter
// that a timer advances once a second, at no particular phase: an item
// stored with an expiry of E seconds is gone once that counter has moved
// E times, which can be as little as just over E-2 real seconds after the
// store (the counter may already be almost two ticks behind the real time
// when the item is stored). Two seconds make up for the coarse counter;
// the 100 ms for a late timer.
const tickSlack = 2*time.Second + 100*time.Millisecond

// maxRelative is the longest expiry memcached reads as relative, in
// seconds (30 days); a larger number would be an absolute unix time, judged
// against memcached's wall clock, which the client cannot see.
const maxRelative = 30 * 24 * 60 * 60

// maxAttempts bounds the read-compare-write rounds of one call that lose
// the compare-and-swap to a concurrent write of the same item.
const maxAttempts = 16

// expirySeconds is the memcached expiry, in seconds, of a lease of ttl: at
// least ttl after memcached receives the write (see tickSlack).
func expirySeconds(ttl time.Duration) (int32, error) {
	s := (ttl + tickSlack + time.Second - 1) / time.Second
	if s > maxRelative {
		return 0, fmt.Errorf("memcachelock: TTL %v is over memcached's 30-day limit of relative expiries (less %v)", ttl, tickSlack)
	}
	return int32(s), nil
}

// New returns a core.Client whose leases are items of mc, a client of one
// memcached server (or of a server list that every Client routes the same
// way and that never changes while locks are held). The Client declares
// core.CapClaims (records and claims, which cronlock needs; see the package
// documentation for their clock and for eviction) and nothing else beyond
// the lease: no fair queueing, release notifications across processes or
// listing.
// The error is core.ErrInvalidOption for a nil mc or a bad option.
//
// mc's Timeout bounds every call to memcached (gomemcache takes no
// context); give mc a MaxIdleConns above the number of calls you expect at
// once, or connections are opened and closed at every call. Closing the
// Client does not close mc.
func New(mc *memcache.Client, opts ...Option) (*core.Client, error) {
	if mc == nil {
		return nil, fmt.Errorf("%w: memcachelock: nil *memcache.Client", core.ErrInvalidOption)
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	return core.New(&backend{mc: mc, ns: cfg.ns, skew: cfg.skew, clock: cfg.clock}, cfg.core...)
}

// backend implements core.Backend on memcached.
type backend struct {
	mc *memcache.Client
	ns string
	// skew bounds how far two Clients' clocks are apart, for
	// ClaimRecordWithin (WithClockSkew); clock is time.Now but in tests.
	skew  time.Duration
	clock func() time.Time
	// high is the highest fence this backend has issued, on any key: a
	// counter seeded again is seeded above it (see nextFence).
	high atomic.Int64
}

var (
	_ core.Backend     = (*backend)(nil)
	_ core.RecordStore = (*backend)(nil)
)

func (b *backend) Capabilities() core.Capability { return core.CapClaims }

// itemNames returns the names of name's lease item and fence counter item:
// the namespace, then SHA-256 of the name in unpadded base64url (lock
// names may hold any byte and be longer than memcached's 250), then ":l"
// or ":f".
func (b *backend) itemNames(name string) (lease, fence string) {
	h := b.hashName(name)
	return h + ":l", h + ":f"
}

// hashName is the namespace and the SHA-256 of name in unpadded
// base64url: the items of name add a suffix (":l", ":f", ":r").
func (b *backend) hashName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return b.ns + base64.RawURLEncoding.EncodeToString(sum[:])
}

// lease is the value of a lease item:
// "1|<fence>|<expiry>|<end ms>|<token>|<metadata>".
type lease struct {
	// fence is the holder's fence; 0 while the acquirer that added the item
	// has not drawn it yet.
	fence int64
	// exp is the expiry in seconds the item was last written with: a write
	// never asks for less (rule 4).
	exp int32
	// endMs is when the lease ends by the TTLs asked for, in unix ms on
	// the clock of the client that wrote it last: for Inspect and for
	// waiters, never for a decision.
	endMs int64
	token string
	meta  string
}

const formatVersion = "1"

func (l lease) encode() []byte {
	b := make([]byte, 0, 48+len(l.token)+len(l.meta))
	b = append(b, formatVersion...)
	b = append(b, '|')
	b = strconv.AppendInt(b, l.fence, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(l.exp), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, l.endMs, 10)
	b = append(b, '|')
	b = append(b, l.token...)
	b = append(b, '|')
	return append(b, l.meta...)
}

var errBadItem = errors.New("memcachelock: an item of the lock namespace does not hold a lease (another program writes there?)")

func decode(v []byte) (lease, error) {
	var f [5][]byte
	rest := v
	for i := range f {
		var ok bool
		f[i], rest, ok = bytes.Cut(rest, []byte{'|'})
		if !ok {
			return lease{}, errBadItem
		}
	}
	if string(f[0]) != formatVersion {
		return lease{}, errBadItem
	}
	fence, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	exp, err2 := strconv.ParseInt(string(f[2]), 10, 32)
	end, err3 := strconv.ParseInt(string(f[3]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(f[4]) == 0 {
		return lease{}, errBadItem
	}
	return lease{fence: fence, exp: int32(exp), endMs: end, token: string(f[4]), meta: string(rest)}, nil
}

// left is the lease's remaining time by endMs, at least a millisecond: the
// item exists, so the lease is held, whatever the writer's clock says.
func (l lease) left(now time.Time) time.Duration {
	return max(time.Duration(l.endMs-now.UnixMilli())*time.Millisecond, time.Millisecond)
}

// holderTTL is the holder's remaining time for a waiter: by endMs while
// that is ahead, else unknown (-1) — a lease lingers in memcached past its
// end (see tickSlack), and a waiter then polls with backoff.
func (l lease) holderTTL(now time.Time) time.Duration {
	if d := time.Duration(l.endMs-now.UnixMilli()) * time.Millisecond; d > 0 {
		return d
	}
	return -1
}

// wrap marks an error as memcached's.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("memcachelock: %w", err)
}

// Acquire adds the lease item if there is none. The fence is drawn only
// once the item is the caller's, and written into it with a
// compare-and-swap against the item as read after the add: the counter was
// incremented while the item stood, so every fence drawn for an earlier
// holder was drawn before, and every later holder's will be drawn after
// (an acquirer whose item vanished meanwhile loses the swap and starts
// again). A re-entry keeps the fence and never shortens the expiry.
func (b *backend) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	exp, err := expirySeconds(req.TTL)
	if err != nil {
		return core.AcquireResult{}, err
	}
	leaseKey, fenceKey := b.itemNames(req.Key)
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return core.AcquireResult{}, err
		}
		now := time.Now()
		mine := lease{exp: exp, endMs: now.Add(req.TTL).UnixMilli(), token: req.Token, meta: req.Metadata}
		err := b.mc.Add(&memcache.Item{Key: leaseKey, Value: mine.encode(), Expiration: exp})
		if err != nil && !errors.Is(err, memcache.ErrNotStored) {
			return core.AcquireResult{}, wrap(err)
		}
		it, err := b.mc.Get(leaseKey)
		switch {
		case errors.Is(err, memcache.ErrCacheMiss): // expired or released meanwhile
			continue
		case err != nil:
			return core.AcquireResult{}, wrap(err)
		}
		cur, err := decode(it.Value)
		if err != nil {
			return core.AcquireResult{}, err
		}
		if cur.token != req.Token {
			return core.AcquireResult{HolderTTL: cur.holderTTL(now)}, nil
		}
		// Ours: just added (fence 0), or a re-entry.
		next := cur
		next.meta = req.Metadata
		next.exp = max(cur.exp, exp)
		next.endMs = max(cur.endMs, mine.endMs)
		if next.fence == 0 {
			if next.fence, err = b.nextFence(ctx, fenceKey); err != nil {
				return core.AcquireResult{}, err
			}
		}
		it.Value, it.Expiration = next.encode(), next.exp
		switch err := b.mc.CompareAndSwap(it); {
		case err == nil:
			return core.AcquireResult{Acquired: true, Fence: next.fence}, nil
		case errors.Is(err, memcache.ErrCASConflict), gone(err):
			continue // changed or gone since the read: look again
		default:
			return core.AcquireResult{}, wrap(err)
		}
	}
	return core.AcquireResult{}, fmt.Errorf("memcachelock: the lease of %q changed under %d attempts in a row", req.Key, maxAttempts)
}

// nextFence increments key's fence counter. A missing counter (never made,
// evicted, or lost in a restart) is added with the client's clock in
// microseconds, or just above the highest fence this backend issued if
// that is higher; a concurrent add wins and is incremented.
func (b *backend) nextFence(ctx context.Context, key string) (int64, error) {
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, err := b.mc.Increment(key, 1)
		if err == nil {
			if n > math.MaxInt64 {
				return 0, fmt.Errorf("memcachelock: fence counter %q at %d, past int64", key, n)
			}
			return b.issued(int64(n)), nil
		}
		if !errors.Is(err, memcache.ErrCacheMiss) {
			return 0, wrap(err)
		}
		seed := max(time.Now().UnixMicro(), b.high.Load()+1)
		err = b.mc.Add(&memcache.Item{Key: key, Value: strconv.AppendInt(nil, seed, 10)})
		switch {
		case err == nil:
			return b.issued(seed), nil
		case !errors.Is(err, memcache.ErrNotStored):
			return 0, wrap(err)
		}
	}
	return 0, fmt.Errorf("memcachelock: fence counter %q vanished %d times in a row", key, maxAttempts)
}

// issued records f as issued and returns it.
func (b *backend) issued(f int64) int64 {
	for h := b.high.Load(); f > h && !b.high.CompareAndSwap(h, f); h = b.high.Load() {
	}
	return f
}

// Extend rewrites token's lease item with a compare-and-swap against the
// item as read: the same value, and an expiry of the TTL's seconds or the
// one it had, whichever is more. It reports ttl as the time left: the item
// lives at least that long (expirySeconds), and memcached does not say how
// much longer.
func (b *backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	exp, err := expirySeconds(ttl)
	if err != nil {
		return 0, err
	}
	leaseKey, _ := b.itemNames(key)
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		now := time.Now()
		it, cur, err := b.read(leaseKey)
		switch {
		case err != nil:
			return 0, err
		case it == nil || cur.token != token:
			return 0, core.ErrNotHeld
		}
		next := cur
		next.exp = max(cur.exp, exp)
		next.endMs = max(cur.endMs, now.Add(ttl).UnixMilli())
		it.Value, it.Expiration = next.encode(), next.exp
		switch err := b.mc.CompareAndSwap(it); {
		case err == nil:
			return ttl, nil
		case errors.Is(err, memcache.ErrCASConflict), gone(err):
			continue // changed or gone since the read: the next read says which
		default:
			return 0, wrap(err)
		}
	}
	return 0, fmt.Errorf("memcachelock: the lease of %q changed under %d attempts in a row", key, maxAttempts)
}

// Release deletes token's lease item with a compare-and-swap to an
// expiry in the past (memcached expires such an item at once), against the
// item as read: a deposed holder's late release finds another token, or a
// changed item, and deletes nothing. memcached's delete takes no
// compare-and-swap value, so it is not used. The fence counter stays.
func (b *backend) Release(ctx context.Context, key, token string) (bool, error) {
	leaseKey, _ := b.itemNames(key)
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		it, cur, err := b.read(leaseKey)
		switch {
		case err != nil:
			return false, err
		case it == nil || cur.token != token:
			return false, nil
		}
		it.Expiration = -1
		switch err := b.mc.CompareAndSwap(it); {
		case err == nil:
			return true, nil
		case gone(err): // expired meanwhile
			return false, nil
		case errors.Is(err, memcache.ErrCASConflict): // extended or re-entered meanwhile
			continue
		default:
			return false, wrap(err)
		}
	}
	return false, fmt.Errorf("memcachelock: the lease of %q changed under %d attempts in a row", key, maxAttempts)
}

// read gets a lease item: nil when there is none.
func (b *backend) read(key string) (*memcache.Item, lease, error) {
	it, err := b.mc.Get(key)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		return nil, lease{}, nil
	case err != nil:
		return nil, lease{}, wrap(err)
	}
	l, err := decode(it.Value)
	if err != nil {
		return nil, lease{}, err
	}
	return it, l, nil
}

// Inspect reads the lease item, and the fence counter when the key is free
// or its holder has not drawn its fence yet. TTL is estimated from the
// lease's end as its writer's clock put it (at least 1 ms while the item
// exists).
func (b *backend) Inspect(ctx context.Context, key string) (core.Info, error) {
	if err := ctx.Err(); err != nil {
		return core.Info{}, err
	}
	leaseKey, fenceKey := b.itemNames(key)
	it, cur, err := b.read(leaseKey)
	if err != nil {
		return core.Info{}, err
	}
	var info core.Info
	if it != nil {
		info = core.Info{Held: true, Token: cur.token, Metadata: cur.meta, Fence: cur.fence, TTL: cur.left(time.Now())}
	}
	if info.Fence == 0 {
		f, err := b.mc.Get(fenceKey)
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
		case err != nil:
			return core.Info{}, wrap(err)
		default:
			// memcached may pad a counter with spaces.
			n, err := strconv.ParseInt(string(bytes.TrimSpace(f.Value)), 10, 64)
			if err != nil {
				return core.Info{}, fmt.Errorf("memcachelock: fence counter %q holds %q", fenceKey, f.Value)
			}
			info.Fence = n
		}
	}
	return info, nil
}

// Close does nothing: the backend owns no resource (the memcache.Client is
// the caller's).
func (b *backend) Close() error { return nil }

// gone reports whether a compare-and-swap found its item gone since the
// read: memcached answers NOT_FOUND to a cas on a missing item (gomemcache:
// ErrCacheMiss), not NOT_STORED; both are taken here. As first built, only
// NOT_STORED was, and an item that expired or was evicted between the read
// and the cas made the call fail as an outage (review 10) — a Release or
// Extend said ErrUnavailable instead of ErrNotHeld, and a WithToken
// re-entry of a lapsed lease failed instead of taking the free key.
func gone(err error) bool {
	return errors.Is(err, memcache.ErrCacheMiss) || errors.Is(err, memcache.ErrNotStored)
}
