package core

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var _ sharder = (*redisBackend)(nil)

var (
	//go:embed scripts/lib_pub.lua
	libPub string
	//go:embed scripts/lib_pub_sharded.lua
	libPubSharded string
	//go:embed scripts/lib_owns.lua
	libOwns string
	//go:embed scripts/lib_rel.lua
	libRel string
	//go:embed scripts/lib_fence.lua
	libFence string
	//go:embed scripts/lib_wait.lua
	libWait string
	//go:embed scripts/lib_queue.lua
	libQueue string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/acquire_fair.lua
	acquireFairLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/fence_max.lua
	fenceMaxLua string
	//go:embed scripts/lib_sem.lua
	libSem string
	//go:embed scripts/sem_acquire.lua
	semAcquireLua string
	//go:embed scripts/sem_extend.lua
	semExtendLua string
	//go:embed scripts/sem_release.lua
	semReleaseLua string
	//go:embed scripts/inspect_holds.lua
	inspectHoldsLua string
	//go:embed scripts/rw_rlock.lua
	rwRLockLua string
	//go:embed scripts/rw_lock.lua
	rwLockLua string
	//go:embed scripts/rw_unlock.lua
	rwUnlockLua string
	//go:embed scripts/acquire_all.lua
	acquireAllLua string
	//go:embed scripts/evict.lua
	evictLua string
	//go:embed scripts/extend_many.lua
	extendManyLua string
	//go:embed scripts/queue_touch.lua
	queueTouchLua string

	// Each script is the shared helpers it uses (only the definitions it
	// calls: composeLua) followed by its body. Those
	// that publish come in two flavours (notifyScripts), classic and
	// sharded pub/sub; acquireScript and releaseScript name classic ones.
	classicScripts     = newNotifyScripts(libPub)
	shardedScripts     = newNotifyScripts(libPubSharded)
	acquireScript      = classicScripts.acquire
	extendScript       = newLuaScript(extendLua, libOwns, libFence)
	releaseScript      = classicScripts.release
	inspectScript      = newLuaScript(inspectLua, libPub, libWait)
	fenceMaxScript     = newLuaScript(fenceMaxLua, libFence)
	semAcquireScript   = newLuaScript(semAcquireLua, libFence, libQueue, libSem)
	semExtendScript    = newLuaScript(semExtendLua, libQueue, libSem)
	rwRLockScript      = newLuaScript(rwRLockLua, libFence, libQueue, libSem)
	inspectHoldsScript = newLuaScript(inspectHoldsLua, libQueue)
	rwLockScript       = newLuaScript(rwLockLua, libOwns, libFence, libQueue, libSem)
	acquireAllScript   = newLuaScript(acquireAllLua, libFence)
	extendManyScript   = newLuaScript(extendManyLua, libOwns)
	queueTouchScript   = newLuaScript(queueTouchLua)

	// Arguments that never change, boxed once.
	retentionArg any = fenceRetention.Milliseconds()
	claimArg     any = fairClaim.Milliseconds()
	entryTTLArg  any = fairEntryTTL.Milliseconds()
	noArg        any = ""
	yesArg       any = "1"
)

// notifyScripts are the scripts that publish notifications, built on one
// of the two pub helpers: lib_pub.lua (PUBLISH) or lib_pub_sharded.lua
// (SPUBLISH, in the key's slot).
type notifyScripts struct {
	acquire, acquireFair, release, semRelease, rwUnlock, evict *luaScript
}

func newNotifyScripts(pub string) *notifyScripts {
	return &notifyScripts{
		acquire:     newLuaScript(acquireLua, pub, libOwns, libFence, libWait),
		acquireFair: newLuaScript(acquireFairLua, pub, libOwns, libFence, libWait),
		release:     newLuaScript(releaseLua, pub, libOwns, libFence, libWait, libRel),
		semRelease:  newLuaScript(semReleaseLua, pub, libQueue, libSem),
		rwUnlock:    newLuaScript(rwUnlockLua, pub, libOwns, libQueue, libRel),
		evict:       newLuaScript(evictLua, pub, libOwns, libFence),
	}
}

// NewRedis returns a Client whose leases live on one Redis deployment: a
// server (*redis.Client), a Sentinel group (*redis.Client from
// redis.NewFailoverClient) or a Cluster (*redis.ClusterClient). All keys of
// one lock share a hash tag, so every script runs on one Cluster slot.
// Scripts run with EVALSHA. NewRedis does no I/O; the error is
// ErrNilClient for a nil rdb, or ErrInvalidOption (or ErrInvalidTTL)
// saying which option is wrong.
//
// The watchdog declares a lease lost at its expiry even if a renewal is
// still waiting for Redis, whatever the client's timeouts. Configure the
// Redis client so that calls fail fast — ContextTimeoutEnabled: true, and
// few retries (MaxRetries, DialerRetries) for short TTLs — and a lost lease
// then reports its real cause (a refused connection, say) instead of
// "context deadline exceeded": each renewal attempt gets a third of the
// time the lease has left. A command whose connection broke after it was
// sent is sent again by go-redis (MaxRetries) and may run twice. The
// Client's scripts answer a second run as they answered the first — an
// acquisition re-enters, a claim knows its own, an eviction remembers its
// answer, and a release knows it released (a release that handed the key
// on or woke a waiter, a permit's, a read hold's and a Redlock node's
// leave a mark for 15 s) — but for a mutex release with nobody waiting
// whose key a newcomer took between the two runs, and a run sent again
// after 15 s: they say ErrNotHeld (Do: ErrLost) for a lease held to the
// end. Few or no retries (MaxRetries -1) make such a lost answer an error
// instead.
func NewRedis(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if isNil(rdb) {
		return nil, ErrNilClient
	}
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	rb := newRedisBackend(rdb, &c.cfg)
	rb.defaultTTL = c.cfg.lock.ttl.Truncate(time.Millisecond)
	rb.defaultTTLArg = rb.defaultTTL.Milliseconds()
	c.setBackend(rb, 2*time.Second, CapFair|CapNotify|CapReplicaAck|CapList|CapClaims|CapPrimitives)
	rb.grants = c.nt.grantChannel(c.cfg.prefix)
	rb.grantsArg = rb.grants
	sharded := c.cfg.sharded
	if sharded {
		rb.pubs = shardedScripts
	}
	rb.ps.init(rdb, c.nt, sharded)
	if sharded {
		rb.ps.shard.fallback = rb.classicFallback
	}
	return c, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// newRedisBackend is the backend of rdb, publishing classic, for NewRedis
// or one of NewRedlock's nodes.
func newRedisBackend(rdb redis.UniversalClient, cfg *clientConfig) *redisBackend {
	b := &redisBackend{rdb: rdb, hot: rdb, ackN: cfg.ackN, ackTimeout: cfg.ackTimeout, pubs: classicScripts}
	// A Cluster client splits a pipeline by node, a goroutine each, which
	// cost more than the shared round trips saved (BenchmarkRedisCluster).
	if c, ok := rdb.(*redis.Client); ok {
		b.hot = &coalescer{rdb: c, lanes: coalesceLanes}
	}
	return b
}

// redisBackend keeps leases on one Redis deployment.
type redisBackend struct {
	rdb        redis.UniversalClient
	hot        processor // rdb, or a coalescer in front of it
	ps         redisPubSub
	pubs       *notifyScripts // the scripts that publish, classic or sharded
	ackN       int            // WithReplicaAck
	ackTimeout time.Duration

	defaultTTL    time.Duration // the Client's (WithTTL), in whole milliseconds
	defaultTTLArg any           // its milliseconds, boxed once (ttlArg)

	// grants is the Client's own grant channel: a queued mutex waiter
	// names it when it joins, and a release that grants it the key
	// publishes there, reaching this process alone. It is subscribed with
	// the first channel a waiter subscribes (grantsAsked), in the same
	// SUBSCRIBE, so an acquisition never waits for it.
	grants      string
	grantsArg   any // grants, boxed once: every release names it
	grantsAsked atomic.Bool

	// waits are the Client's mutex waiters queued, by lease (keyWaits):
	// one touch per key serves them all.
	wmu   sync.Mutex
	waits map[string]*keyWaits
}

var _ waitMarker = (*redisBackend)(nil)

// mark marks n's lease as waited for (an observer's mark, as a waiter's
// attempt sets it: see scripts/acquire.lua), for waitMarkTTL.
func (b *redisBackend) mark(ctx context.Context, n names) (lapsed bool, err error) {
	err = b.rdb.SetArgs(ctx, n.mark, "1", redis.SetArgs{TTL: waitMarkTTL(), Get: true}).Err()
	if errors.Is(err, redis.Nil) {
		return true, nil
	}
	return false, err
}

// touch is the periodic call of a queued mutex waiter that heard nothing.
// One call per key serves all of the Client's waiters of that key: it
// pushes the Client's lapse time in A on, drops the Clients that lapsed,
// keeps A and W alive (see scripts/lib_wait.lua), and tells which of them
// are still queued; a waiter that asks within half a touch period of that
// call, before the holder it saw expires, reads its answer. It returns the
// holder's remaining time, or attempt true if a full attempt could succeed
// now (the key free, or the token no longer queued: granted, or dropped).
func (b *redisBackend) touch(ctx context.Context, n names, token string) (holderTTL time.Duration, attempt bool, err error) {
	b.wmu.Lock()
	kw := b.waits[n.lease]
	if kw == nil {
		b.wmu.Unlock()
		return 0, true, nil
	}
	if _, ok := kw.tokens[token]; !ok {
		b.wmu.Unlock()
		return 0, true, nil
	}
	start := time.Now()
	if el := start.Sub(kw.touchedAt); el < touchPoll()/2 && kw.holderTTL > el {
		// Another waiter's call, recent, and the holder it saw has not
		// expired since.
		ttl, gone := kw.holderTTL-el, kw.gone[token]
		b.wmu.Unlock()
		return ttl, gone, nil
	}
	members := make([]string, 0, len(kw.tokens))
	for t := range kw.tokens {
		members = append(members, t+"|"+b.grants)
	}
	b.wmu.Unlock()

	entry := touchEntryTTL().Milliseconds()
	gone := make(map[string]bool)
	ttl := time.Duration(-1)
	for len(members) > 0 || ttl == -1 {
		chunk := members[:min(len(members), maxTouchMembers)]
		members = members[len(chunk):]
		args := make([]any, 0, 2+len(chunk))
		args = append(args, entry, b.grants)
		for _, m := range chunk {
			args = append(args, m)
		}
		v, err := queueTouchScript.Run(ctx, b.rdb, []string{n.lease, n.queue, n.dues}, args...).Int64Slice()
		if err != nil || len(v) != 1+len(chunk) {
			if err == nil {
				err = fmt.Errorf("core: unexpected touch reply %v", v)
			}
			return 0, true, err
		}
		ttl = time.Duration(v[0]) * time.Millisecond
		if v[0] == -2 {
			ttl = -2 * time.Millisecond // free
		} else if v[0] < 0 {
			// Held without expiry (PTTL -1; set by hand), or granted to
			// an earlier waiter that has not claimed it (-3): no expiry
			// to time the next touch to, so the usual pace.
			ttl = touchPoll()
		}
		for i, m := range chunk {
			if v[1+i] == 0 {
				gone[strings.TrimSuffix(m, "|"+b.grants)] = true
			}
		}
	}
	mine := gone[token] // read before the map is shared: queued edits it
	b.wmu.Lock()
	// The others read this answer, as of this call's start (not while the
	// call is on its way: the previous answer is older than that).
	kw.touchedAt, kw.holderTTL, kw.gone, kw.aliveAt = start, ttl, gone, start
	b.wmu.Unlock()
	return ttl, mine || ttl < 0, nil
}

// maxTouchMembers bounds the members one touch call names.
const maxTouchMembers = 512

// keyWaits are a Client's mutex waiters queued in one key's W.
type keyWaits struct {
	tokens    map[string]struct{} // queued, not yet served or gone
	aliveAt   time.Time           // when the Client was last entered in A (the call's start)
	touchedAt time.Time           // when the last touch answered was sent
	holderTTL time.Duration       // its answer: the holder's time left (<0: free)
	gone      map[string]bool     // its answer: tokens no longer queued
}

// aliveArg is "1" when a waiter joining n's W must (re)enter the Client
// in A (see lib_wait.lua): it was not within a touch period.
func (b *redisBackend) aliveArg(n names) string {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if kw := b.waits[n.lease]; kw != nil && time.Since(kw.aliveAt) < touchPoll() {
		return ""
	}
	return "1"
}

// queued records that token joined n's W (alive: entering the Client in A,
// in a call sent at start).
func (b *redisBackend) queued(n names, token string, alive bool, start time.Time) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	kw := b.waits[n.lease]
	if kw == nil {
		if len(b.waits) >= 1024 { // drop keys nobody here waits on
			for k, x := range b.waits {
				if len(x.tokens) == 0 {
					delete(b.waits, k)
				}
			}
		}
		if b.waits == nil {
			b.waits = make(map[string]*keyWaits)
		}
		kw = &keyWaits{tokens: make(map[string]struct{})}
		b.waits[n.lease] = kw
	}
	kw.tokens[token] = struct{}{}
	delete(kw.gone, token)
	if alive {
		kw.aliveAt = start
	}
}

// unqueued records that token left n's W (served, or giving up).
func (b *redisBackend) unqueued(n names, token string) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if kw := b.waits[n.lease]; kw != nil {
		delete(kw.tokens, token)
		if len(kw.tokens) == 0 && time.Since(kw.aliveAt) >= touchPoll() {
			delete(b.waits, n.lease)
		}
	}
}

func (b *redisBackend) acquire(ctx context.Context, n names, token, value string, ttl time.Duration, fair, enqueue bool) (acquireResult, error) {
	// The keys and arguments live on the stack (luaScript.run copies
	// them); the token is boxed once, and is the value too without
	// metadata.
	var kb [7]string
	var ab [9]any
	tok := any(token)
	val := tok
	if value != token {
		val = value
	}
	script, keys := b.pubs.acquire, append(kb[:0], n.lease, n.fence)
	args := append(ab[:0], tok, val, b.ttlArg(ttl), retentionFor(ttl))
	heard := false // grants on the Client's channel were heard before the script ran
	waits := false // a mutex waiter that may join W
	alive := ""    // "1": it enters the Client in A
	switch {
	case n.limit > 0:
		join := "0"
		if fair && enqueue {
			join = "1"
		}
		script, keys = semAcquireScript, append(kb[:0], n.lease, n.fence, n.vals, n.queue, n.dues, n.since())
		args = append(args, n.limit, entryTTLArg, join, b.grantsArg)
	case n.limit == rwRead:
		script, keys = rwRLockScript, append(kb[:0], n.lease, n.readers, n.vals, n.queue, n.fence)
	case n.limit == rwWrite:
		join := "0"
		if enqueue {
			join = "1"
		}
		script, keys = rwLockScript, append(kb[:0], n.lease, n.readers, n.vals, n.queue, n.fence, n.dues, n.since())
		args = append(args, entryTTLArg, join)
	case fair:
		join := "0"
		if enqueue {
			join = "1"
			heard, waits, alive = b.grantsHeard(n), true, b.aliveArg(n)
		}
		script, keys = b.pubs.acquireFair, append(kb[:0], n.lease, n.fence, n.queue, n.dues)
		args = append(args, touchEntryTTL().Milliseconds(), join, b.grantsArg, alive, claimArg)
	case enqueue:
		heard, waits, alive = b.grantsHeard(n), true, b.aliveArg(n)
		keys = append(keys, n.queue, n.dues, n.mark)
		args = append(args, "", touchEntryTTL().Milliseconds(), b.grantsArg, alive, waitMarkTTL().Milliseconds())
	}
	start := time.Now()
	var r acquireResult
	var err error
	if b.ackN > 0 {
		r, err = b.acquireAcked(ctx, n, token, script, slices.Clone(keys), slices.Clone(args))
	} else {
		var vb [2]int64
		var v []int64
		v, err = replyInts(script.run(ctx, b.hot, keys, args...), vb[:0])
		if err == nil {
			r, err = parseAcquire(v)
		}
	}
	if err != nil {
		return acquireResult{}, err
	}
	if waits {
		// A fair joiner is queued unless served; a default-mode one when
		// the script says so.
		if !r.acquired && (fair || r.queued) {
			b.queued(n, token, alive == "1", start)
			r.named = heard
		} else {
			b.unqueued(n, token)
		}
	}
	return r, nil
}

// grantsHeard reports whether grants to the Client's waiters of n are
// heard yet: on the Client's grant channel, or (sharded) on the key's grant
// twin, subscribed and confirmed with the key's channel. It never waits: a
// waiter that joined before its subscription flowed makes its usual
// re-attempt after its join (named false), which claims a grant whose
// message was missed.
func (b *redisBackend) grantsHeard(n names) bool {
	if b.ps.sharded && b.ps.mode.Load() != shardOff {
		return b.ps.nt.heard(n.lease)
	}
	return b.ps.nt.grantsReady()
}

// ttlArg is ttl in milliseconds, as a script argument: the Client's
// default TTL is boxed once.
func (b *redisBackend) ttlArg(ttl time.Duration) any {
	if ttl == b.defaultTTL {
		return b.defaultTTLArg
	}
	return ttl.Milliseconds()
}

// acquireAcked runs the acquisition and WAIT in one pipeline on the key's
// primary, and gives the lease back if too few replicas acknowledged it.
func (b *redisBackend) acquireAcked(ctx context.Context, n names, token string, script *luaScript, keys []string, args []any) (acquireResult, error) {
	cmd, acks, err := b.runAcked(ctx, n.lease, script, keys, args)
	if err != nil {
		return acquireResult{}, err
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return acquireResult{}, err
	}
	r, err := parseAcquire(v)
	if err != nil || !r.acquired {
		return r, err
	}
	if err := b.checkAcks(acks); err != nil {
		ctx := context.WithoutCancel(ctx)
		switch {
		case !n.given: // nobody else holds with the Client's own token
			_, _ = b.release(ctx, n, token)
		case !r.reentered: // what it set, unless re-entered since
			_, _ = b.releaseFenced(ctx, n, token, r.fence)
		} // else the lease was there before: its holder's
		return acquireResult{}, err
	}
	return r, nil
}

// runAcked runs script followed by WAIT on one connection to the primary
// of key, loading the script if the server lacks it.
func (b *redisBackend) runAcked(ctx context.Context, key string, script *luaScript, keys []string, args []any) (*redis.Cmd, *redis.Cmd, error) {
	var conn redis.Cmdable = b.rdb
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		conn = m
	}
	// WAIT must answer well before ctx's deadline, so that a shortfall is
	// reported as such rather than as a timeout.
	wait := b.ackTimeout
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/2)
	}
	waitMs := max(wait.Milliseconds(), 1)
	for try := 0; ; try++ {
		pipe := conn.Pipeline()
		cmd := script.EvalSha(ctx, pipe, keys, args...)
		acks := pipe.Do(ctx, "wait", b.ackN, waitMs)
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && try == 0 {
			if err := script.Load(ctx, conn).Err(); err != nil {
				return nil, nil, err
			}
			continue
		}
		return cmd, acks, nil
	}
}

func (b *redisBackend) checkAcks(acks *redis.Cmd) error {
	got, err := acks.Int64()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrReplicaAck, err)
	}
	if got < int64(b.ackN) {
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrReplicaAck, got, b.ackN, b.ackTimeout)
	}
	return nil
}

func parseAcquire(v []int64) (acquireResult, error) {
	if len(v) != 2 {
		return acquireResult{}, fmt.Errorf("core: unexpected acquire reply %v", slices.Clone(v)) // v may be on the caller's stack
	}
	if v[0] == 1 || v[0] == 2 { // acquired, or re-entered with the same token
		return acquireResult{acquired: true, reentered: v[0] == 2, fence: v[1]}, nil
	}
	ttl := time.Duration(v[1]) * time.Millisecond
	if v[1] < 0 {
		ttl = -1
	}
	return acquireResult{holderTTL: ttl, queued: v[0] == 3}, nil
}

func (b *redisBackend) extend(ctx context.Context, reqs []extendReq) {
	if b.ackN > 0 {
		for i := range reqs {
			r := &reqs[i]
			cmd, acks, err := b.runAcked(ctx, r.n.lease, r.script(), r.keys(), r.args())
			if err != nil {
				r.set(0, err)
				continue
			}
			r.set(cmd.Int64())
			if r.ok {
				if err := b.checkAcks(acks); err != nil {
					r.ok, r.err = false, err
				}
			}
		}
		return
	}
	if len(reqs) == 1 {
		r := &reqs[0]
		r.set(r.script().Run(ctx, b.rdb, r.keys(), r.args()...).Int64())
		return
	}
	// Mutex and write-hold leases of one TTL (and one Cluster slot) renew
	// in one script; the rest one script each, all in one pipeline.
	groups := b.extendGroups(reqs)
	cmds := make([]*redis.Cmd, len(reqs))
	many := make([]*redis.Cmd, len(groups))
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for g, idx := range groups {
			many[g] = extendManyScript.process(ctx, p, extendManyCmd(reqs, idx), true)
		}
		for i, r := range reqs {
			if r.grouped {
				continue
			}
			cmds[i] = r.script().EvalSha(ctx, p, r.keys(), r.args()...)
		}
		return nil
	})
	for g, idx := range groups {
		vs, err := many[g].Int64Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			a := extendManyCmd(reqs, idx)
			a[0], a[1] = "eval", extendManyScript.src
			vs, err = extendManyScript.process(ctx, b.rdb, a, true).Int64Slice()
		}
		if err == nil && len(vs) != len(idx) {
			err = fmt.Errorf("core: extend of %d leases answered %d", len(idx), len(vs))
		}
		for j, i := range idx {
			r := &reqs[i]
			switch {
			case err != nil:
				r.set(0, err)
			case vs[j] == 1: // held: it now lasts at least its ttl
				r.set(max(r.ttl.Milliseconds(), 1), nil)
			default:
				r.set(min(vs[j], 0), nil)
			}
		}
	}
	for i := range reqs {
		r := &reqs[i]
		if r.grouped {
			continue
		}
		v, err := cmds[i].Int64()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = r.script().Run(ctx, b.rdb, r.keys(), r.args()...).Int64()
		}
		r.set(v, err)
	}
}

// extendManyCmd is the EVALSHA of extend_many.lua for the leases idx of
// reqs (of one TTL), built in one slice from the key and token each lease
// boxed once (extendReq.boxed): a batch of hundreds allocates only the
// slice.
func extendManyCmd(reqs []extendReq, idx []int) []any {
	a := make([]any, 4+2*len(idx))
	a[0], a[1], a[2] = "evalsha", extendManyScript.sha, len(idx)
	keys, toks := a[3:3+len(idx)], a[4+len(idx):]
	a[3+len(idx)] = reqs[idx[0]].ttl.Milliseconds()
	for j, i := range idx {
		r := &reqs[i]
		if r.boxed != nil {
			keys[j], toks[j] = r.boxed[0], r.boxed[1]
		} else {
			keys[j], toks[j] = r.n.lease, r.token
		}
	}
	return a
}

// extendGroups groups the mutex and write-hold renewals of reqs that one
// extend_many.lua call can renew: those of one TTL (and, on a Cluster, one
// slot), at least two. It marks them grouped.
func (b *redisBackend) extendGroups(reqs []extendReq) [][]int {
	_, cluster := b.rdb.(*redis.ClusterClient)
	if !cluster { // one server: one group, if all have one TTL (the common case)
		idx := make([]int, 0, len(reqs))
		same := true
		for i := range reqs {
			if reqs[i].script() == extendScript && !reqs[i].keep {
				idx = append(idx, i)
				same = same && reqs[i].ttl == reqs[idx[0]].ttl
			}
		}
		if len(idx) < 2 {
			return nil
		}
		if same {
			for _, i := range idx {
				reqs[i].grouped = true
			}
			return [][]int{idx}
		}
	}
	type group struct {
		slot uint16
		ttl  time.Duration
	}
	bySlot := map[group][]int{}
	var order []group
	for i := range reqs {
		if reqs[i].script() != extendScript || reqs[i].keep {
			continue
		}
		g := group{ttl: reqs[i].ttl}
		if cluster {
			g.slot = clusterSlot(reqs[i].n.lease)
		}
		if _, ok := bySlot[g]; !ok {
			order = append(order, g)
		}
		bySlot[g] = append(bySlot[g], i)
	}
	var groups [][]int
	for _, g := range order {
		if idx := bySlot[g]; len(idx) >= 2 {
			for _, i := range idx {
				reqs[i].grouped = true
			}
			groups = append(groups, idx)
		}
	}
	return groups
}

func (r *extendReq) keys() []string {
	switch {
	case r.n.limit > 0:
		return []string{r.n.lease, r.n.vals}
	case r.n.limit == rwRead:
		return []string{r.n.readers, r.n.vals}
	case r.keep:
		return []string{r.n.lease, r.n.fence}
	}
	return []string{r.n.lease}
}

// args are the extend script's arguments (see keys).
func (r *extendReq) args() []any {
	if r.keep && r.script() == extendScript {
		return []any{r.token, r.ttl.Milliseconds(), (r.ttl + fenceRetention).Milliseconds()}
	}
	return []any{r.token, r.ttl.Milliseconds()}
}

// script is the extend script of the request's kind of lease: a permit or
// a read hold lives in a sorted set, a mutex or a write hold is a key.
func (r *extendReq) script() *luaScript {
	if r.n.limit > 0 || r.n.limit == rwRead {
		return semExtendScript
	}
	return extendScript
}

// set records the extend script's reply: the lease's ms left (>= 1) when
// extended, 0 another owner, -1 gone.
func (r *extendReq) set(v int64, err error) {
	r.ok, r.gone, r.err = err == nil && v >= 1, err == nil && v == -1, err
	if r.ok {
		r.left = time.Duration(v) * time.Millisecond
	}
}

func (b *redisBackend) release(ctx context.Context, n names, token string) (bool, error) {
	return b.releaseNonce(ctx, n, token, "", 0) // one publish per release: no nonce needed
}

// releaseFenced is release of the acquisition of fence: a mutex lease or
// write hold of the token taken or re-entered after it (a higher counter)
// stays.
func (b *redisBackend) releaseFenced(ctx context.Context, n names, token string, fence int64) (bool, error) {
	return b.releaseNonce(ctx, n, token, "", fence)
}

// releaseNonce is release with the nonce its notification carries, and,
// when fence is not 0, only of the acquisition of fence (releaseFenced).
func (b *redisBackend) releaseNonce(ctx context.Context, n names, token, nonce string, fence int64) (bool, error) {
	if n.limit > 0 {
		v, err := b.pubs.semRelease.run(ctx, b.rdb, []string{n.lease, n.vals, n.queue, n.dues, n.since(),
			n.lease + relSuffix + ":" + releaseNonce()}, token, n.limit).Int64()
		return v == 1, err
	}
	if n.rw() {
		hold, fenceArg, rel := "r", "", ""
		if n.limit == rwWrite {
			hold = "w"
			if fence != 0 {
				fenceArg, rel = strconv.FormatInt(fence, 10), n.lease+relSuffix
			}
		} else {
			rel = n.readers + relSuffix + ":" + releaseNonce()
		}
		keys := []string{n.lease, n.readers, n.vals, n.queue, n.dues, n.since(), n.fence}
		if rel != "" {
			keys = append(keys, rel)
		}
		v, err := b.pubs.rwUnlock.run(ctx, b.rdb, keys, token, hold, fenceArg).Int64()
		return v == 1, err
	}
	var kb [7]string // on the stack: run copies them
	keys := append(kb[:0], n.lease, n.fence, n.queue, n.dues, n.mark, n.oldQ, n.rel)
	if nonce != "" {
		keys[6] = n.lease + relSuffix + ":" + nonce // a Redlock node's: release.lua's rel_seen
	}
	waited, fenceArg := releaseArgs(n, fence)
	v, err := b.pubs.release.run(ctx, b.hot, keys, token, claimArg, retentionArg, nonce, b.grantsArg, waited, fenceArg).Int64()
	if unsent(err) {
		// It waited for the coalescer until its ctx ended (every lane's
		// call hung on a stalled server, say). Dropped, it would leave the
		// key held until its TTL and its waiters asleep: it goes out now,
		// on a connection of its own, and its caller waits for it as for
		// any release, so that the Client knows the release is on its way
		// until it ends (an acquisition of its token meanwhile is voided).
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		v, err = b.pubs.release.run(lctx, b.rdb, keys, token, claimArg, retentionArg, nonce, b.grantsArg, waited, fenceArg).Int64()
		cancel()
	}
	// A waiter giving up: out of W, or holding a grant it passed on.
	b.unqueued(n, token)
	return v == 1, err
}

// releaseArgs are release.lua's ARGV[6] and ARGV[7] for n's lease, of
// fence (0: any lease of the token).
func releaseArgs(n names, fence int64) (waited, fenceArg any) {
	waited, fenceArg = noArg, noArg
	if n.waited {
		waited = yesArg
	}
	if fence != 0 {
		fenceArg = fence // written in decimal, as a string would be: one allocation, not two
	}
	return waited, fenceArg
}

// canHandOver reports whether a release of n's lease may hand the key to a
// waiter of this Client (handOver): a mutex, and no replica acknowledgement
// (a hand-over is an acquisition the waiter's WAIT would have to confirm).
func (b *redisBackend) canHandOver(n names) bool {
	return n.limit == 0 && b.ackN == 0
}

// handOver is releaseFenced, except that when nobody queues for the key in
// W (or release 0.2.0's Q), the lease is not deleted but made the lease of
// a waiter of this Client, of value and ttl, with a fence of its own
// (release.lua's hand-over). It returns the waiter's fence when it did;
// else, as releaseFenced, whether the token's lease was released.
func (b *redisBackend) handOver(ctx context.Context, n names, token string, fence int64, value string, ttl time.Duration) (handed int64, released bool, err error) {
	var kb [7]string
	keys := append(kb[:0], n.lease, n.fence, n.queue, n.dues, n.mark, n.oldQ, n.rel)
	waited, fenceArg := releaseArgs(n, fence)
	args := []any{token, claimArg, retentionArg, noArg, b.grantsArg, waited, fenceArg, noArg, value, b.ttlArg(ttl), retentionFor(ttl)}
	cmd := b.pubs.release.run(ctx, b.hot, keys, args...)
	if unsent(cmd.Err()) { // as releaseNonce: it goes out all the same
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		cmd = b.pubs.release.run(lctx, b.rdb, keys, args...)
		cancel()
	}
	b.unqueued(n, token)
	v, err := cmd.Result()
	if err != nil {
		return 0, false, err
	}
	switch r := v.(type) {
	case int64:
		return 0, r == 1, nil
	case []any:
		if len(r) == 2 {
			if code, ok := r[0].(int64); ok && code == 2 {
				if f, ok := r[1].(int64); ok && f > 0 {
					return f, true, nil
				}
			}
		}
	}
	return 0, false, fmt.Errorf("core: unexpected hand-over reply %v", v)
}

// A handOverer is a backend whose release can hand a mutex's key to a
// waiter of the same Client in the same call (see Client.handOver).
type handOverer interface {
	canHandOver(n names) bool
	handOver(ctx context.Context, n names, token string, fence int64, value string, ttl time.Duration) (handed int64, released bool, err error)
}

// leave takes a waiter of a caller's token (WithToken) that gives up out of
// n's queue, passing on a grant to the token not claimed yet; unlike a
// release, it leaves a lease, hold or permit of the token be: another
// process may hold it (a twin that claimed the grant).
func (b *redisBackend) leave(ctx context.Context, n names, token string) error {
	defer b.unqueued(n, token)
	switch {
	case n.limit > 0:
		return b.pubs.semRelease.run(ctx, b.rdb, []string{n.lease, n.vals, n.queue, n.dues, n.since()}, token, n.limit, yesArg).Err()
	case n.rw():
		return b.pubs.rwUnlock.run(ctx, b.rdb, []string{n.lease, n.readers, n.vals, n.queue, n.dues, n.since(), n.fence}, token, "q", "").Err()
	}
	keys := []string{n.lease, n.fence, n.queue, n.dues, n.mark, n.oldQ}
	return b.pubs.release.run(ctx, b.rdb, keys, token, claimArg, retentionArg, "", b.grantsArg, yesArg, "", yesArg).Err()
}

// A queueLeaver can take a waiter out of a key's queue without releasing
// what its token holds (see redisBackend.leave), for the names canLeave
// accepts.
type queueLeaver interface {
	canLeave(n names) bool
	leave(ctx context.Context, n names, token string) error
}

func (b *redisBackend) canLeave(names) bool { return true }

// releaseNonce returns a value unique to one release (64 random bits).
func releaseNonce() string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

// shard names the Cluster master that stores key ("" off Cluster, or when
// the slot map cannot tell).
func (b *redisBackend) sharded() bool {
	_, ok := b.rdb.(*redis.ClusterClient)
	return ok
}

func (b *redisBackend) shard(ctx context.Context, key string) string {
	addr, _ := clusterMaster(ctx, b.rdb, key)
	return addr
}

// clusterMaster returns the address of the Cluster master that serves
// key's slot, and ok; "" and false off Cluster, or when the slot map
// cannot tell (within a second).
func clusterMaster(ctx context.Context, rdb redis.UniversalClient, key string) (addr string, ok bool) {
	cc, isCluster := rdb.(*redis.ClusterClient)
	if !isCluster {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return "", false
	}
	return m.Options().Addr, true
}

func (b *redisBackend) inspect(ctx context.Context, n names) (Info, error) {
	v, err := inspectScript.Run(ctx, b.rdb, []string{n.lease, n.fence, n.queue, n.dues}).Slice()
	if err != nil {
		return Info{}, err
	}
	if len(v) != 5 {
		return Info{}, fmt.Errorf("core: unexpected inspect reply %v", v)
	}
	var info Info
	if s, ok := v[0].(string); ok {
		info.Held = true
		info.parseValue(s)
		if pttl, ok := v[1].(int64); ok {
			info.TTL = time.Duration(pttl) * time.Millisecond
			if pttl < 0 {
				info.TTL = -1
			}
		}
	}
	if s, ok := v[2].(string); ok {
		info.Fence, _ = strconv.ParseInt(s, 10, 64)
	}
	if q, ok := v[3].(int64); ok {
		info.Waiters = int(q)
	}
	if ms, ok := v[4].(int64); ok {
		info.OldestWait = time.Duration(ms) * time.Millisecond
	}
	return info, nil
}

func (b *redisBackend) holds(ctx context.Context, sem, rw names) (holdsInfo, error) {
	v, err := inspectHoldsScript.Run(ctx, b.rdb,
		[]string{sem.lease, sem.vals, rw.lease, rw.readers, rw.vals, rw.queue, rw.fence, sem.dues,
			sem.queue, sem.since(), rw.dues, rw.since()}).Slice()
	if err != nil {
		return holdsInfo{}, err
	}
	if len(v) < 4 || (len(v)-4)%3 != 0 {
		return holdsInfo{}, fmt.Errorf("core: unexpected inspect reply %v", v)
	}
	var n [4]int64
	for i := range n {
		n[i], _ = v[i].(int64)
	}
	hi := holdsInfo{writers: int(n[0]), permitWaiters: int(n[1]),
		writerAge: time.Duration(n[2]) * time.Millisecond, permitAge: time.Duration(n[3]) * time.Millisecond}
	for i := 4; i+2 < len(v); i += 3 {
		kind, _ := v[i].(string)
		fv, _ := v[i+1].(string)
		ms, _ := v[i+2].(string)
		left, _ := strconv.ParseInt(ms, 10, 64)
		hi.holds = append(hi.holds, parseHold(Kind(kind), fv, left))
	}
	return hi, nil
}

// parseHold makes a Hold of "<fence>|<token>[|<metadata>]" and its ms left.
func parseHold(kind Kind, fv string, left int64) Hold {
	f, v, _ := strings.Cut(fv, "|")
	h := Hold{Kind: kind, TTL: time.Duration(left) * time.Millisecond}
	if left < 0 {
		h.TTL = -1
	}
	h.Fence, _ = strconv.ParseInt(f, 10, 64)
	h.Token, h.Metadata, _ = strings.Cut(v, "|")
	return h
}

func (b *redisBackend) setRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	return b.rdb.Set(ctx, key, value, ttl).Err()
}

func (b *redisBackend) getRecord(ctx context.Context, key string) (string, bool, error) {
	v, err := b.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return v, err == nil, err
}

func (b *redisBackend) claimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	n, err := claimScript.Run(ctx, b.rdb, []string{key, key + ":c"}, value, ttl.Milliseconds(),
		releaseNonce(), min(ttl, claimIDLife).Milliseconds()).Int64()
	return n == 1, err
}

// claimIDLife is the longest a claim's id is kept beside it (claim.lua):
// longer than go-redis takes to send a command again after a broken
// connection.
const claimIDLife = time.Minute

var (
	//go:embed scripts/claim.lua
	claimLua string
	//go:embed scripts/claim_within.lua
	claimWithinLua string
	//go:embed scripts/set_newer.lua
	setNewerLua string

	claimScript       = newLuaScript(claimLua)
	claimWithinScript = newLuaScript(claimWithinLua)
	setNewerScript    = newLuaScript(setNewerLua)
)

func (b *redisBackend) claimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, plannedMs, windowMs int64) (verdict, error) {
	n, err := claimWithinScript.Run(ctx, b.rdb, []string{key, key + ":c"}, value, ttl.Milliseconds(), plannedMs, windowMs,
		releaseNonce(), claimIDLife.Milliseconds()).Int64()
	if err != nil {
		return 0, err
	}
	switch v := verdict(n); v {
	case verdictClaimed, verdictTaken, verdictLate:
		return v, nil
	}
	return 0, fmt.Errorf("core: claim script returned %d", n)
}

func (b *redisBackend) setRecordNewer(ctx context.Context, key, ordKey, value string, order int64, ttl time.Duration) (bool, error) {
	n, err := setNewerScript.Run(ctx, b.rdb, []string{key, ordKey}, value, order, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (b *redisBackend) announce(ctx context.Context, channel, payload string) error {
	if b.ps.sharded && b.ps.mode.Load() != shardOff {
		err := b.rdb.SPublish(ctx, channel, payload).Err()
		if !unknownCommand(err) {
			return err
		}
	}
	return b.rdb.Publish(ctx, channel, payload).Err()
}

func (b *redisBackend) subscribe(ctx context.Context, channel string) error {
	if b.ps.shardedNow(ctx) {
		// The key's grant twin first, in the same SSUBSCRIBE (one slot).
		return b.ps.shard.subscribe(ctx, b.ps.shard.twin(channel), channel)
	}
	if b.grants != "" && channel != b.grants && !b.grantsAsked.Swap(true) {
		// The Client's first wait: its grant channel comes along, first,
		// so that its confirmation arrives before the waiter's.
		return b.ps.subscribe(ctx, b.grants, channel)
	}
	return b.ps.subscribe(ctx, channel)
}

// classicFallback subscribes channels with classic pub/sub, with the
// Client's grant channel, for good: the server refused SSUBSCRIBE (before
// Redis 7) after a probe that could not tell. The scripts fall back to
// PUBLISH by themselves.
func (b *redisBackend) classicFallback(channels []string) {
	b.ps.mode.Store(shardOff)
	if !b.grantsAsked.Swap(true) {
		channels = append([]string{b.grants}, channels...)
	}
	if len(channels) > 0 {
		_ = b.ps.subscribe(b.ps.ctx, channels...)
	}
}

func (b *redisBackend) unsubscribe(channels ...string) {
	if !b.ps.sharded {
		b.ps.unsubscribe(channels...)
		return
	}
	// Each where it was subscribed: a Client whose first probe was
	// undecided may have both kinds.
	sharded := make([]string, 0, 2*len(channels))
	var classic []string
	b.ps.shard.mu.Lock()
	for _, ch := range channels {
		if b.ps.shard.where[ch] != nil || b.ps.shard.moving[ch] {
			sharded = append(sharded, b.ps.shard.twin(ch), ch)
		} else {
			classic = append(classic, ch)
		}
	}
	b.ps.shard.mu.Unlock()
	if len(sharded) > 0 {
		b.ps.shard.unsubscribe(sharded...)
	}
	if len(classic) > 0 {
		b.ps.unsubscribe(classic...)
	}
}

func (b *redisBackend) close() { b.ps.close() }

// redisPubSub is the Client's subscriptions. Classic ones (SUBSCRIBE) share
// one connection, whose goroutine starts with the first subscription and
// feeds the notifier; sharded ones (SSUBSCRIBE, WithShardedNotify) are
// shard's, a connection per master.
type redisPubSub struct {
	rdb redis.UniversalClient
	nt  *notifier

	mu     sync.Mutex
	ps     *redis.PubSub
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	loops  sync.WaitGroup // every receive loop, and the sharded sweeper

	// sharded: subscribe with SSUBSCRIBE unless the server lacks it, which
	// the first subscription finds out (shardedNow) and records in mode.
	sharded  bool
	shard    shardSubs
	probe    sync.Mutex
	mode     atomic.Int32
	sweeping sync.Once
}

// The modes of a sharded redisPubSub: not known yet, SSUBSCRIBE, or
// SUBSCRIBE (a server without sharded pub/sub).
const (
	shardUnknown int32 = iota
	shardOn
	shardOff
)

func (r *redisPubSub) init(rdb redis.UniversalClient, nt *notifier, sharded bool) {
	r.rdb, r.nt, r.sharded = rdb, nt, sharded
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if sharded {
		r.shard.init(rdb, nt, r.ctx, &r.loops, nt.grants)
	}
}

// shardedNow reports whether a subscription is to be sharded: with
// WithShardedNotify, unless the server has no SPUBLISH. The first call asks
// the server (an SPUBLISH nobody hears); an answer other than "unknown
// command" — a timeout, say — leaves it undecided, to be asked again, and
// counts as sharded.
func (r *redisPubSub) shardedNow(ctx context.Context) bool {
	if !r.sharded {
		return false
	}
	switch r.mode.Load() {
	case shardOn:
		return true
	case shardOff:
		return false
	}
	r.probe.Lock()
	defer r.probe.Unlock()
	if m := r.mode.Load(); m != shardUnknown {
		return m == shardOn
	}
	pctx, cancel := context.WithTimeout(ctx, confirmWait)
	defer cancel()
	err := r.rdb.SPublish(pctx, r.nt.grants, "").Err()
	switch {
	case err == nil:
		r.mode.Store(shardOn)
	case unknownCommand(err):
		r.mode.Store(shardOff)
		return false
	}
	r.sweeping.Do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.closed { // under mu, before close can wait
			r.loops.Add(1)
			go r.sweep()
		}
	})
	return true
}

// sweep drops the notifier's idle subscriptions every second, for a
// sharded Client (the classic loop does it for a classic one).
func (r *redisPubSub) sweep() {
	defer r.loops.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			r.nt.sweep(now)
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *redisPubSub) subscribe(ctx context.Context, channels ...string) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	start := r.ps == nil
	if start {
		r.ps = r.rdb.Subscribe(r.ctx)
		r.loops.Add(1) // under mu, before close can wait
	}
	ps := r.ps
	r.mu.Unlock()
	// The subscription is shared by every waiter of the channel, so it is
	// not bound to this waiter's ctx; go-redis records the channel even
	// when the call fails, and subscribes it again on reconnecting.
	sctx, cancel := context.WithTimeout(r.ctx, confirmWait)
	defer cancel()
	err := ps.Subscribe(sctx, channels...)
	if start {
		go r.loop(ps)
	}
	return err
}

func (r *redisPubSub) unsubscribe(channels ...string) {
	r.mu.Lock()
	ps := r.ps
	r.mu.Unlock()
	if ps != nil {
		ctx, cancel := context.WithTimeout(r.ctx, time.Second)
		_ = ps.Unsubscribe(ctx, channels...)
		cancel()
	}
}

func (r *redisPubSub) loop(ps *redis.PubSub) {
	defer r.loops.Done()
	lastSweep := time.Now()
	for {
		msg, err := ps.ReceiveTimeout(r.ctx, time.Second)
		if r.ctx.Err() != nil {
			return
		}
		if now := time.Now(); now.Sub(lastSweep) >= time.Second {
			r.nt.sweep(now)
			lastSweep = now
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			// The connection broke; go-redis reconnects and resubscribes
			// on the next receive. Waiters meanwhile rely on their timers.
			if r.sharded && r.mode.Load() != shardOff {
				// Its channels are few, if any (the sharded ones have
				// connections of their own): none is taken for unheard,
				// which would make their new waiters wait for a
				// confirmation that does not come.
				r.nt.mayHaveMissed()
			} else {
				r.nt.interrupted()
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.ctx.Done():
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			r.nt.deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				r.nt.confirm(m.Channel)
			}
		}
	}
}

func (r *redisPubSub) close() {
	r.mu.Lock()
	r.closed = true
	ps := r.ps
	r.mu.Unlock()
	r.cancel()
	if ps != nil {
		_ = ps.Close()
	}
	if r.sharded {
		r.shard.close()
	}
	r.loops.Wait()
}

// acquireAll takes every mutex lease of ns in one script, all or none,
// when one server stores them all: a single server (or Sentinel group),
// or one Cluster slot. With replica acknowledgement (WithReplicaAck) it
// declines, as for names spread over slots.
func (b *redisBackend) canAcquireAll(ns []names) bool {
	if b.ackN > 0 {
		return false
	}
	switch b.rdb.(type) {
	case *redis.Client:
		return true
	case *redis.ClusterClient:
		s := clusterSlot(ns[0].lease)
		for _, n := range ns[1:] {
			if clusterSlot(n.lease) != s {
				return false
			}
		}
		return true
	}
	return false // a client type whose routing is not known here
}

func (b *redisBackend) acquireAll(ctx context.Context, ns []names, values []string, ttl time.Duration) (allResult, error) {
	keys := make([]string, 0, 2*len(ns))
	args := make([]any, 0, 2+len(ns))
	args = append(args, ttl.Milliseconds(), retentionFor(ttl))
	for i, n := range ns {
		keys = append(keys, n.lease, n.fence)
		args = append(args, values[i])
	}
	v, err := acquireAllScript.Run(ctx, b.rdb, keys, args...).Int64Slice()
	if err != nil {
		return allResult{}, err
	}
	switch {
	case len(v) == 3 && v[0] == 0 && v[1] >= 1 && int(v[1]) <= len(ns):
		return allResult{held: int(v[1]) - 1, holderTTL: time.Duration(v[2]) * time.Millisecond}, nil
	case len(v) == 1+len(ns) && v[0] == 1:
		return allResult{held: -1, fences: v[1:]}, nil
	}
	return allResult{}, fmt.Errorf("core: unexpected acquire-all reply %v", v)
}
