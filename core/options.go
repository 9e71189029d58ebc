package core

import (
	"fmt"
	"strings"
	"time"
)

// Defaults used when no option says otherwise.
const (
	// DefaultTTL is the lease length when WithTTL is not given.
	DefaultTTL = 30 * time.Second
	// DefaultKeyPrefix is the prefix of every Redis key when WithKeyPrefix is not given.
	DefaultKeyPrefix = "latchkey"
	// MaxKeyLen is the longest lock key accepted, in bytes.
	MaxKeyLen = 1024
	// MaxTokenLen is the longest token WithToken accepts, in bytes.
	MaxTokenLen = 128
	// MaxMetadataLen is the longest metadata WithMetadata accepts, in bytes.
	MaxMetadataLen = 1024
)

// An Option configures a Client. It is accepted by NewRedis, NewMemory and
// NewRedlock. Options are sealed: only this package makes them.
type Option interface {
	applyClient(*clientConfig)
}

// A LockOption configures one TryLock, Lock or Do call, overriding the
// Client's default.
type LockOption interface {
	applyLock(*settings)
}

// A SharedOption is accepted both by a constructor, where it sets the
// Client's default for every lock, and by a lock call, where it overrides
// that default for the call.
type SharedOption interface {
	Option
	LockOption
}

// settings are the per-lock parameters.
type settings struct {
	ttl         time.Duration
	autoRenew   bool
	waitTimeout time.Duration
	retryBudget int // -1: unlimited
	metadata    string
	kind        Kind // KindLeader for Campaign, else derived (kindOf)
	token       string
	fair        bool
	named       bool          // the last attempt queued, naming the Client's grant channel (set by attempt)
	margin      time.Duration // WithDriftMargin; -1: the default, per interval
	err         error         // the first invalid option
}

func defaultSettings() settings {
	return settings{ttl: DefaultTTL, autoRenew: true, retryBudget: -1, margin: -1}
}

func (s *settings) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

type clientConfig struct {
	prefix     string
	lock       settings
	observer   Observer
	ackN       int
	ackTimeout time.Duration
	sharded    bool // WithShardedNotify
	err        error
}

type sharedOption func(*settings)

func (f sharedOption) applyLock(s *settings)       { f(s) }
func (f sharedOption) applyClient(c *clientConfig) { f(&c.lock) }
func (f clientOption) applyClient(c *clientConfig) { f(c) }
func (f lockOption) applyLock(s *settings)         { f(s) }

type clientOption func(*clientConfig)
type lockOption func(*settings)

// WithTTL sets the lease length (default DefaultTTL, 30 s). A lease that is
// not renewed expires this long after it was acquired or last extended. A
// TTL under one millisecond is ErrInvalidTTL (from the constructor when
// given as a Client default, else from the lock call); a
// fraction of a millisecond is dropped (Redis counts whole milliseconds).
func WithTTL(ttl time.Duration) SharedOption {
	return sharedOption(func(s *settings) { s.ttl = ttl })
}

// WithAutoRenew turns the watchdog on or off (default on). When on, the
// Client renews the lease every ttl/3 until it is released, and reports a
// lease it could not keep through Lock.Lost. When off, the lease expires
// after its TTL unless the holder calls Lock.Extend, and Lock.Lost closes
// when that expiry passes.
func WithAutoRenew(on bool) SharedOption {
	return sharedOption(func(s *settings) { s.autoRenew = on })
}

// WithDriftMargin sets how much earlier than the server's expiry the holder
// stops believing it holds a lease. A lease's belief deadline is the send
// time of the last write the server confirmed (the acquisition, a renewal,
// an Extend) plus the time the server gave the lease then, minus this
// margin; Lock.Lost closes at that deadline. The margin covers the holder's
// clock running slower than the server's. Default: 1% of each confirmed
// interval plus 2 ms, at most a tenth of it (for the default 30 s TTL,
// 302 ms). The margin must be below the TTL; a negative one is an
// ErrInvalidOption. A process paused for longer than the margin can still
// act on a lease it no longer holds: that is what fences are for.
func WithDriftMargin(d time.Duration) SharedOption {
	return sharedOption(func(s *settings) {
		if d < 0 {
			s.fail("negative drift margin %v", d)
		}
		s.margin = d
	})
}

// WithWaitTimeout bounds how long Lock and Do wait for a held key (default 0:
// only ctx bounds the wait). When it runs out the error matches both
// ErrNotAcquired and context.DeadlineExceeded. TryLock ignores it.
func WithWaitTimeout(d time.Duration) SharedOption {
	return sharedOption(func(s *settings) {
		if d < 0 {
			s.fail("negative wait timeout %v", d)
		}
		s.waitTimeout = d
	})
}

// WithRetryBudget bounds how many further attempts Lock and Do make after
// the first one fails (default: no bound but ctx and WithWaitTimeout).
// WithRetryBudget(0) makes Lock behave like TryLock.
func WithRetryBudget(attempts int) SharedOption {
	return sharedOption(func(s *settings) {
		if attempts < 0 {
			s.fail("negative retry budget %d", attempts)
		}
		s.retryBudget = attempts
	})
}

// WithMetadata stores a short description of the holder with the lease —
// for example host and process ID — that Client.Inspect shows to operators
// (default none). At most MaxMetadataLen bytes.
func WithMetadata(meta string) SharedOption {
	return sharedOption(func(s *settings) {
		if len(meta) > MaxMetadataLen {
			s.fail("metadata is %d bytes, over %d", len(meta), MaxMetadataLen)
		}
		s.metadata = meta
	})
}

// WithFair serves waiters of a key in arrival order, like ZooKeeper's
// sequential nodes (default off). Waiters queue in Redis under the key's
// hash tag; a release grants the lease straight to the first live waiter —
// a new fence, a short claim window — and wakes only that waiter (the
// message goes to its Client's own channel, not to every process
// subscribed to the key), so a handoff costs one notification, nobody
// arriving later can barge in, and there is no thundering herd. A waiter
// that gives up leaves the queue; one that dies drops out when its entry
// expires (30 s on Redis, 3 s in memory), and a grant it does not claim
// passes on after its one-second claim window (the waiter next in line is
// told, and looks again then). TryLock with WithFair takes the key only when it is
// free and nobody queues. All lockers of a key should use it: a non-fair
// TryLock or Lock ignores the queue. Not available on Redlock. On a
// Semaphore, permits go in arrival order (see Semaphore); not available on
// an RWMutex (ErrInvalidOption).
func WithFair() SharedOption {
	return sharedOption(func(s *settings) { s.fair = true })
}

// WithToken makes the acquisition use the given token instead of a fresh
// random one. If the lease is currently held with this very token — by this
// process or by another one that handed the token over — the acquisition
// re-enters it: it succeeds at once, lengthens the lease to at least the
// TTL (never shortens it) and, on Redis, takes a new fence, as an
// acquisition does (above the lease's, so that a lease a restart brought
// back is re-entered above the fences handed out since; a read hold or a
// semaphore permit re-entered keeps its fence). The handles then share the
// server's lease. Within one Client the first Release from any of them
// frees it: the other handles of the token are told (Lost) before that
// release reaches the server, and an acquisition with the token that is
// under way while such a release is makes no lock (ErrNotAcquired: the
// release may delete what it got). Across processes, on a Redis mutex or
// write hold, a release ends only the acquisitions it knows of: once another
// process re-entered the lease, a Release from an earlier acquisition finds
// it taken over (ErrNotHeld) and leaves it to the later one; so does a
// release that arrives late — its command held up in the network after
// Release gave up on it, or sent again by the go-redis client after a
// timeout (MaxRetries) — for a lease taken or re-entered under the token
// since. On Redlock, and for semaphore permits and read holds, a release
// deletes whatever the token holds: a handle in another process learns of it
// only at its next renewal, and a late release may delete a lease taken
// under the same token meanwhile (fences still rise, so fenced storage
// rejects that holder's writes). An acquisition under the token that
// fails (too few replica acknowledgements, too few Redlock nodes) takes
// back only a lease it set itself, never one it re-entered: that one is
// its holder's. Where no answer came to say which (a timeout, a Redlock
// node that did not answer), what it may have set lapses at its TTL. A
// waiter under the token that gives up leaves the queue and releases
// nothing (a grant to the token not claimed yet is passed on) — on Redis,
// in memory and on a backend of New that is a QueueLeaver (etcdlock). On
// one that is not, whose only way out of a queue is a Release, it
// releases the token: this Client's handles of it are told (Lost) first,
// but a lease another process holds under the token ends without a word
// (zklock is safe anyway: it never touches another session's node). Hand
// a token over to a process that takes the work over, not to one that
// goes on sharing it. Tokens are 1 to
// MaxTokenLen bytes of ASCII letters, digits and "-_.:". Use Lock.Token to
// obtain a token to hand over.
func WithToken(token string) LockOption {
	return lockOption(func(s *settings) {
		if !validToken(token) {
			s.fail("token %q: want 1 to %d bytes of [A-Za-z0-9-_.:]", token, MaxTokenLen)
		}
		s.token = token
	})
}

// WithKeyPrefix sets the prefix of every Redis key and channel the Client
// uses (default DefaultKeyPrefix). The lease of key K is "<prefix>:{K}" and
// its fence counter "<prefix>:{K}:fence", so both share one Redis Cluster
// slot. The prefix must be 1 to 256 bytes without '{' or '}'.
func WithKeyPrefix(prefix string) Option {
	return clientOption(func(c *clientConfig) {
		if prefix == "" || len(prefix) > 256 || strings.ContainsAny(prefix, "{}") {
			if c.err == nil {
				c.err = fmt.Errorf("%w: key prefix %q: want 1 to 256 bytes without braces", ErrInvalidOption, prefix)
			}
			return
		}
		c.prefix = prefix
	})
}

// WithReplicaAck makes every lease write — acquisition and renewal — wait
// until n replicas acknowledged it (Redis WAIT n timeout), so a failover to
// a replica cannot silently drop a held lease. An acquisition that gets
// fewer acknowledgements is released and fails with ErrReplicaAck; a
// renewal that does retries while the lease lasts. Default: no waiting
// (n = 0). On Redlock it applies to each node. Ignored by NewMemory.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return clientOption(func(c *clientConfig) {
		if n < 0 || n > 0 && timeout <= 0 {
			if c.err == nil {
				c.err = fmt.Errorf("%w: replica ack %d within %v", ErrInvalidOption, n, timeout)
			}
			return
		}
		c.ackN, c.ackTimeout = n, timeout
	})
}

// WithShardedNotify chooses how a Redis Client's notifications travel:
// sharded pub/sub (SPUBLISH and SSUBSCRIBE, Redis 7 and later) when on,
// classic pub/sub (PUBLISH and SUBSCRIBE) when off (the default).
//
// On a Cluster, a PUBLISH is broadcast over the cluster bus to every node,
// so each release, grant and wake-up costs every master; a sharded one
// stays on the master of the key's slot. The Client then opens one
// subscription connection per master it waits on, instead of one in all,
// and follows a slot that moves. On a server without sharded pub/sub
// (before Redis 7) the Client falls back to classic pub/sub by itself.
//
// Every Client that shares keys must make the same choice, so turn it on
// for a whole fleet in one restart. A waiter that subscribed one way does
// not hear a release or a grant published the other way: it waits for its
// timers instead, and a queued waiter whose grant it never heard loses its
// place (the grant lapses after its claim window), so while both kinds run
// a waiter may not get a busy key at all. Never unsafe: no lease is ever
// held twice. Ignored by NewMemory and NewRedlock.
func WithShardedNotify(on bool) Option {
	return clientOption(func(c *clientConfig) { c.sharded = on })
}

func validToken(tok string) bool {
	if tok == "" || len(tok) > MaxTokenLen {
		return false
	}
	for i := 0; i < len(tok); i++ {
		switch b := tok[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9',
			b == '-', b == '_', b == '.', b == ':':
		default:
			return false
		}
	}
	return true
}

// validKey applies the key rule: 1 to MaxKeyLen bytes, not starting with
// '}'. A key is stored inside the hash tag "{<key>}", and Redis Cluster
// takes the tag to end at the first '}': a leading '}' would leave an empty
// tag, the lease and its fence counter in different slots, and every
// script failing with CROSSSLOT. Any other byte is fine; a '}' later in the
// key only shortens the tag (keys that share the bytes before it share a
// slot), which is harmless.
func validKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, over %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	if key[0] == '}' {
		return fmt.Errorf("%w: key %q starts with '}' (it would leave the Redis Cluster hash tag empty)", ErrInvalidKey, key)
	}
	return nil
}
