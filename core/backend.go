package core

import (
	"context"
	"sync/atomic"
	"time"
)

// fenceRetention is how long a fence counter lives from the last
// acquisition that set it. A fence is one above the counter and never below
// the server clock in microseconds (lib_fence.lua): when the counter is
// gone (expired, lost) or stale (a snapshot, a lagging replica promoted),
// the clock is above every fence handed out before (a counter gains one
// per acquisition, the clock a million per second). So fences keep rising,
// and a released key leaves nothing in Redis after fenceRetention.
//
// The assumption: the server's clock never steps back by fenceRetention or
// more, nor, across a restart or failover, by more than the time it took.
// A counter set after such a step could stand below fences handed out
// before it. A step back while a counter lives is harmless, whatever its
// size: the counter only counts up, and one that stands ahead of the clock
// lives until the clock has passed it, and fenceRetention beyond (ahead_ms
// in lib_fence.lua; TestFencesRiseAcrossLongClockStepBack).
//
// A counter outlives the leases of its key, as a fenced release needs it
// to: an acquisition gives it at least its lease's TTL and a minute
// (retentionFor), a re-entry the lease's time left and a minute, and a
// Client renews it with a lease's renewal when it could otherwise expire
// first (lease.keepCounter).
const fenceRetention = 5 * time.Minute

// retentionFor is the retention an acquisition of a lease of ttl gives its
// fence counter, as the script argument: fenceRetention, or the TTL and a
// minute when that is longer.
func retentionFor(ttl time.Duration) any {
	if ttl+time.Minute <= fenceRetention {
		return retentionArg
	}
	return (ttl + time.Minute).Milliseconds()
}

// relSuffix names the release marks of a primitive: "<lease>:rel" of a
// mutex or write hold, a sorted set of the fences of recent releases that
// woke or granted a waiter (scripts/lib_rel.lua); and a key of its own,
// "<…>:rel:<nonce>", set for 15 s by each release of a permit, a read
// hold or a Redlock node's lease, which carries a nonce. With them a
// release that go-redis sent again after its answer was lost answers
// "released", as its first run did, though it finds the key another's. A
// mutex release with nobody to tell leaves none: the counter, still at its
// fence, says the same, unless a newcomer took the key in between.
const relSuffix = ":rel"

// names are the storage names of one lock key. They share the hash tag
// {<key>}, so a script touching them all runs on one Cluster slot.
type names struct {
	lease string // "<prefix>:{<key>}", also its release channel
	fence string // "<prefix>:{<key>}:fence"
	queue string // "<prefix>:{<key>}:w", queued waiters (scripts/lib_wait.lua)
	dues  string // "<prefix>:{<key>}:w:a", the Clients that keep them alive
	mark  string // "<prefix>:{<key>}:w:m", the sign that someone waits (scripts/release.lua)
	oldQ  string // "<prefix>:{<key>}:q", the queue of a Client of release 0.2.0
	rel   string // "<prefix>:{<key>}:rel", the release mark (relSuffix)

	// A semaphore's names instead (limit > 0): lease "<prefix>:{<key>}:sem"
	// holds the permits (and is the release channel), fence
	// "<prefix>:{<key>}:sem:fence", vals "<prefix>:{<key>}:sem:v", queue
	// and dues "…:sem:q" and "…:sem:qt" (waiters in arrival order).
	//
	// A read-write lock's (limit rwRead or rwWrite, by the hold): lease
	// "<prefix>:{<key>}:rw" (the writer, and the channel), readers
	// "…:rw:r" (tokens by expiry), vals "…:rw:v", queue "…:rw:q" (waiting
	// writers by entry deadline), dues "…:rw:qa" (a list of the waiting
	// writers in arrival order), fence "…:rw:fence".
	limit   int
	vals    string
	readers string

	// waited: the lease was taken after waiting (Client.wait): someone
	// else likely waits too, so its release looks into the queue first.
	waited bool

	// given: the token is the caller's (WithToken), so others may hold
	// with it: an acquisition that fails takes back only what it set
	// itself, never by token, and a waiter that gives up only leaves the
	// queue.
	given bool
}

// The limit of a read-write lock's names, by the hold.
const (
	rwRead  = -1
	rwWrite = -2
)

// since names the hash of a semaphore's or read-write lock's queue's
// arrival times (token -> ms): the queue's name plus "s" ("…:sem:qs",
// "…:rw:qs"; a mutex has none). Built when needed: it is not on the hot
// path.
func (n names) since() string { return n.queue + "s" }

// rw reports whether n names a read-write lock.
func (n names) rw() bool { return n.limit == rwRead || n.limit == rwWrite }

func (c *Client) names(key string) names {
	// Two allocations for seven names: the lease shares the fence's bytes,
	// the others are parts of one string.
	fence := c.cfg.prefix + ":{" + key + "}:fence"
	lease := fence[:len(fence)-len(":fence")]
	s := lease + ":w:a" + lease + ":w:m" + lease + ":q" + lease + relSuffix
	l := len(lease)
	return names{lease: lease, fence: fence, queue: s[:l+2], dues: s[:l+4],
		mark: s[l+4 : 2*l+8], oldQ: s[2*l+8 : 3*l+10], rel: s[3*l+10:]}
}

// kindNames are the storage names of key for a mutex (limit 0), a
// semaphore (limit > 0) or a read-write lock's hold (rwRead, rwWrite).
func (c *Client) kindNames(key string, limit int) names {
	switch {
	case limit == 0:
		return c.names(key)
	case limit > 0:
		return c.semNames(key, limit)
	}
	w := c.cfg.prefix + ":{" + key + "}:rw"
	return names{lease: w, readers: w + ":r", vals: w + ":v", queue: w + ":q", dues: w + ":qa", fence: w + ":fence", limit: limit}
}

// semNames are the storage names of the semaphore key with limit permits.
func (c *Client) semNames(key string, limit int) names {
	lease := c.cfg.prefix + ":{" + key + "}:sem"
	return names{lease: lease, fence: lease + ":fence", vals: lease + ":v", queue: lease + ":q", dues: lease + ":qt", limit: limit}
}

// Fair-mode timings. A fair waiter's queue entry lives fairEntryTTL and is
// refreshed by every attempt, which the waiter makes at least every
// fairPoll; a grant to a waiter that does not claim it within fairClaim
// expires, and the key passes to the next one.
const (
	fairEntryTTL = 3 * time.Second
	fairPoll     = time.Second
	fairClaim    = time.Second
)

// On Redis, a queued mutex waiter keeps its entry with a touch every
// touchPoll (an entry lives touchEntryTTL): it needs no more, because a
// release that grants the key to the queue's head also tells the waiter
// behind it ("n:", next in line), which then looks again once the grant's
// claim window has passed — so a dead head costs the queue one claim
// window, as before, however seldom the others touch.
const (
	touchEntryTTLDefault = 30 * time.Second
	touchPollDefault     = 10 * time.Second
)

// A Lock waiter of the default mode on Redis marks the key as waited for
// ("<lease>:w:m", see scripts/release.lua) with every attempt that finds
// it held, for waitMarkTTL: a release publishes only while a mark or a
// queue exists, so an uncontended release costs no PUBLISH. The mark must
// outlive the longest sleep between two attempts of a waiter (maxFallback,
// a fallbackDelay) with room to spare; a mark that lapses anyway costs
// the waiter its notification, never its wait: it attempts on its timer.
const waitMarkTTLDefault = 2 * maxFallback

// waitMark holds waitMarkTTL, which the tests shorten.
var waitMark = func() (d atomic.Int64) {
	d.Store(int64(waitMarkTTLDefault))
	return
}()

func waitMarkTTL() time.Duration { return time.Duration(waitMark.Load()) }

// touchTimings holds touchPoll and touchEntryTTL, which the tests shorten
// (atomics: a waiter of another test may still read them).
var touchTimings = func() (t [2]atomic.Int64) {
	t[0].Store(int64(touchPollDefault))
	t[1].Store(int64(touchEntryTTLDefault))
	return
}()

func touchPoll() time.Duration     { return time.Duration(touchTimings[0].Load()) }
func touchEntryTTL() time.Duration { return time.Duration(touchTimings[1].Load()) }

// acquireResult is the outcome of one acquisition attempt.
type acquireResult struct {
	acquired  bool          // the lease is ours (new, or re-entered with the same token)
	reentered bool          // acquired, and the token held it already (a re-entry; a grant's claim is not one)
	fence     int64         // the lease's fence, when acquired
	holderTTL time.Duration // the holder's remaining TTL, when held (<0: unknown)
	queued    bool          // held, and the caller joined the fair queue (waiters queue already)
	named     bool          // held, and the caller is queued under the Client's grant channel
}

// extendReq is one renewal in a batch; the backend fills the rest. An
// extension never shortens a lease: the expiry becomes the later of the
// current one and ttl from now.
type extendReq struct {
	n       *names // the lease's own (not copied: a batch holds hundreds)
	token   string
	boxed   *[2]any // Redis: n.lease and token boxed once, for the batch script (lease.boxed); may be nil
	ttl     time.Duration
	ok      bool          // extended (or already longer)
	left    time.Duration // when ok: the time the lease had left when the server answered
	gone    bool          // not extended: no lease at all (not another owner's)
	heal    []int         // when ok, Redlock: the nodes that had lost the lease
	grouped bool          // Redis: renewed with others in one script (extendGroups)
	keep    bool          // Redis, a mutex or write hold: keep its fence counter alive too (see lease.keepCounter)
	err     error
}

// A sharder tells which server stores a key, so that renewals are batched
// per server and a slow one holds up only its own leases.
type sharder interface {
	// sharded reports whether keys may live on more than one server (a
	// Cluster); if not, shard always names the one server.
	sharded() bool
	shard(ctx context.Context, key string) string
}

// A healer re-creates a confirmed lease on the nodes that had lost it
// (Redlock). The Client calls it only while the lease is not released.
type healer interface {
	// value is the lease's stored value (token, or token|metadata).
	heal(ctx context.Context, n names, value string, ttl time.Duration, nodes []int)
}

// holdsInfo is what holds reports of a key's semaphore and read-write lock.
type holdsInfo struct {
	holds                []Hold
	writers              int           // writers waiting
	permitWaiters        int           // permit waiters queued
	writerAge, permitAge time.Duration // how long the first of each has waited
}

// An allAcquirer is a backend that can take several mutex leases in one
// atomic step (LockAll).
type allAcquirer interface {
	// canAcquireAll reports whether acquireAll can take ns together (not
	// when they are on different servers: the caller then takes them one
	// by one).
	canAcquireAll(ns []names) bool
	// acquireAll takes the lease of every ns[i], with values[i] and ttl,
	// all or none.
	acquireAll(ctx context.Context, ns []names, values []string, ttl time.Duration) (allResult, error)
}

// allResult is the outcome of acquireAll.
type allResult struct {
	held      int           // the index of a member held by someone else (nothing taken), or -1
	holderTTL time.Duration // that holder's remaining TTL
	fences    []int64       // when held is -1: every member's fence
}

// A backend stores leases. All methods are safe for concurrent use.
type backend interface {
	// acquire tries once. fair: serve in arrival order; enqueue: join the
	// fair queue when not served — and, not fair, when waiters queue
	// already (result.queued; the caller is fair from then on).
	acquire(ctx context.Context, n names, token, value string, ttl time.Duration, fair, enqueue bool) (acquireResult, error)
	// extend renews every request, pipelined where the store allows.
	extend(ctx context.Context, reqs []extendReq)
	// release deletes the lease if token holds it (granting it to the
	// first fair waiter, if any, and announcing the release on the lease's
	// channel with a payload unique to this release), or else removes
	// token from the fair queue.
	release(ctx context.Context, n names, token string) (bool, error)
	inspect(ctx context.Context, n names) (Info, error)
	// holds lists a key's semaphore permits and read-write holds (sem and
	// rw name them), how many writers wait and how many permit waiters
	// queue; nil for a backend without those primitives.
	holds(ctx context.Context, sem, rw names) (holdsInfo, error)
	// subscribe asks for release notifications on channel; the backend
	// calls notifier.confirm when they flow and notifier.deliver on each.
	subscribe(ctx context.Context, channel string) error
	// unsubscribe stops notifications on the channels.
	unsubscribe(channels ...string)
	// announce publishes payload on channel (best effort), for observers.
	announce(ctx context.Context, channel, payload string) error
	close()

	// records, for Client.Records
	setRecord(ctx context.Context, key, value string, ttl time.Duration) error
	getRecord(ctx context.Context, key string) (string, bool, error)
	claimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error)
	// claimRecordWithin is claimRecord judged by the store's clock: taken
	// if key holds a claim, else late if the clock is past plannedMs +
	// windowMs (unix ms), else claimed, for claimLife.
	claimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, plannedMs, windowMs int64) (verdict, error)
	// setRecordNewer sets key to value and ordKey to order, both for ttl,
	// unless ordKey holds a greater order; it reports whether it did.
	setRecordNewer(ctx context.Context, key, ordKey, value string, order int64, ttl time.Duration) (bool, error)
}
