package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// A Capability is something a backend may offer beyond the lease itself.
// Capabilities combine with |; Client.Capabilities reports a Client's, and
// Client.Require tells an adapter at start-up what is missing.
type Capability uint16

// The capabilities a backend may lack. NewRedis offers them all; NewMemory
// all but CapReplicaAck (it has no replicas); NewRedlock CapNotify,
// CapReplicaAck, CapList and CapClaims. A Backend given to New declares
// its own (Backend.Capabilities).
const (
	// CapFair: fair queueing — WithFair serves waiters in arrival order,
	// and default-mode waiters that waited long queue (the starvation
	// guard of Lock). Without it WithFair is ErrUnsupported, and waiters
	// compete on every attempt.
	CapFair Capability = 1 << iota
	// CapNotify: release notifications — a waiter sleeps until a release
	// wakes it (the backend implements Notifier). Without it waiters poll,
	// with backoff and jitter, never past the holder's expiry.
	CapNotify
	// CapReplicaAck: a lease write is acknowledged only once replicas
	// hold it, so a failover cannot drop a held lease (Redis with
	// WithReplicaAck; etcd and ZooKeeper writes, which a quorum commits).
	CapReplicaAck
	// CapList: the backend lists its keys (Client.Scan, Records.Scan;
	// the backend implements Lister).
	CapList
	// CapClaims: Client.Records — records and one-shot claims judged by
	// the store's clock, which cronlock builds on (the backend implements
	// RecordStore).
	CapClaims
	// CapPrimitives: Semaphore and RWMutex. Backends given to New do not
	// offer them in this release.
	CapPrimitives
)

var capNames = []string{"fair", "notify", "replica-ack", "list", "claims", "primitives"}

// String names the capabilities in c, joined by '|' ("fair|notify"; ""
// for none).
func (c Capability) String() string {
	var parts []string
	for i, name := range capNames {
		if c&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if rest := c &^ (1<<len(capNames) - 1); rest != 0 {
		parts = append(parts, fmt.Sprintf("Capability(%#x)", uint16(rest)))
	}
	return strings.Join(parts, "|")
}

// Capabilities reports what the Client's backend offers.
func (c *Client) Capabilities() Capability { return c.caps }

// Require returns nil if the Client's backend offers every capability in
// need, and otherwise an error matching ErrUnsupported that names the
// missing ones. Adapters call it when they are built, so that a backend
// that cannot serve them fails at start-up, not at the first tick.
func (c *Client) Require(need Capability) error {
	if missing := need &^ c.caps; missing != 0 {
		return fmt.Errorf("%w: %s", ErrUnsupported, missing)
	}
	return nil
}

// unsupported is the error of a feature that needs a capability the
// backend lacks; it matches ErrInvalidOption too (the caller asked for
// something this Client cannot do).
func unsupported(what string, need Capability) error {
	return fmt.Errorf("%w: %w: %s needs %s", ErrInvalidOption, ErrUnsupported, what, need)
}

// A Backend stores leases for a Client made by New: the open end of
// latchkey, for a store other than Redis. A backend keeps, per key, at
// most one lease — a token, an optional metadata string, a fence and an
// expiry — and answers the five calls below atomically per key. The
// Client does everything else: tokens, re-entry within a process,
// renewal, the loss signal, waiting, bounds, telemetry.
//
// # Writing a backend
//
// The lock's promise — a holder is told it lost its lease no later than
// anyone else can take the key — rests on four rules. Break one and the
// promise is gone, whatever else works:
//
//  1. Expiry is judged by the store's clock, never the caller's. A lease
//     acquired or extended for ttl expires no earlier than ttl after the
//     store received the request. (The Client believes the lease ends at
//     ttl after it sent the request, minus its drift margin: a store that
//     starts the TTL later is safe, one that starts it earlier is not.)
//  2. Fences rise strictly per key, across every acquisition ever made —
//     also after the lease expired, was evicted, or the row, node or key
//     that held it is gone. Keep the counter where the lease's deletion
//     does not take it (a counter row, etcd's revision, ZooKeeper's zxid).
//  3. Release and Extend act only on the lease of the token given
//     (compare-and-delete, compare-and-set); a late call of a deposed
//     holder never touches its successor's lease.
//  4. Acquire with the token that holds the key re-enters: it succeeds,
//     keeps the fence and makes the expiry the later of the current one
//     and ttl from now (never shorter).
//
// Run core/locktest against it: a capability the backend does not
// declare is skipped there with the reason printed. Declare a capability
// only with its interface: CapNotify needs Notifier, CapList needs
// Lister, CapClaims needs RecordStore (New refuses the mismatch).
//
// Keys arrive as the Client names them, "<prefix>:{<key>}" (the
// WithKeyPrefix prefix; the same names as on Redis): opaque strings of at
// most MaxKeyLen+260 bytes that differ for every prefix and key. Errors
// other than ErrNotHeld (from Extend) are the backend's failures: the
// Client reports them as ErrUnavailable, never as contention. All methods
// are called concurrently.
type Backend interface {
	// Capabilities declares what the backend offers beyond the lease.
	Capabilities() Capability
	// Acquire takes req.Key's lease for req.Token if it is free or
	// expired (a new fence, above every earlier one), or re-enters it if
	// req.Token holds it (rule 4). Otherwise Acquired is false and
	// HolderTTL is the holder's remaining time (negative: unknown).
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)
	// Extend sets the expiry of token's lease of key to the later of the
	// current one and ttl from now, and returns the time it has left then
	// (by the store's clock). A key that token does not hold is an error
	// matching ErrNotHeld, and nothing changes.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (left time.Duration, err error)
	// Release deletes key's lease if token holds it and reports whether
	// it did; a release of another token's lease, or of none, is false
	// and changes nothing. The fence counter stays. With CapFair, a
	// token that is queued leaves the queue.
	Release(ctx context.Context, key, token string) (released bool, err error)
	// Inspect reads key's lease without changing it: Held, Token,
	// Metadata, Fence (the holder's, or else the last one issued), TTL;
	// Waiters and OldestWait where the backend queues. Key is set by the
	// Client.
	Inspect(ctx context.Context, key string) (Info, error)
	// Close releases the backend's own resources (not those it was given);
	// the Client calls it once, from Client.Close.
	Close() error
}

// AcquireRequest is one acquisition attempt (Backend.Acquire).
type AcquireRequest struct {
	Key      string        // the lease's name
	Token    string        // the caller's token (1 to MaxTokenLen bytes, no '|')
	Metadata string        // stored with the lease, shown by Inspect (WithMetadata)
	TTL      time.Duration // whole milliseconds, at least one
	// Fair is set only on a backend with CapFair: serve in arrival order —
	// take the key only if it is free and nobody is queued ahead, or if
	// the caller is first in the queue and the key is free. A release
	// hands the key to the queue's head; Notifier's deliver names the
	// head's token, or the head finds the key its own at its next Acquire.
	Fair bool
	// Enqueue, with Fair (a Lock, not a TryLock): a caller not served
	// joins the key's queue (Queued) and keeps its place while it asks
	// again at least every second. A queued caller that gives up leaves
	// the queue with Release of its token, or, under a caller's token
	// (WithToken), with QueueLeaver's Leave where the backend has it.
	// Without Enqueue a caller not served leaves nothing behind.
	Enqueue bool
}

// AcquireResult is the answer to an AcquireRequest.
type AcquireResult struct {
	Acquired  bool          // the lease is req.Token's (new or re-entered)
	Fence     int64         // the lease's fence, when acquired
	HolderTTL time.Duration // when not acquired: the holder's remaining time (<0: unknown)
	Queued    bool          // when not acquired and Enqueue: the caller is in the queue
}

// A Notifier is a Backend with release notifications (CapNotify).
type Notifier interface {
	// Subscribe starts calling deliver for each release of key's lease, in
	// this process and in every other, and returns once a release that
	// happens after it returns is sure to be delivered. deliver("") means
	// a release; deliver(token) that the lease was handed to that queued
	// token (CapFair). Calls for one key never overlap; deliver must not
	// block. A notification lost (a reconnect) costs a waiter only time:
	// it also asks again by itself.
	Subscribe(ctx context.Context, key string, deliver func(token string)) error
	// Unsubscribe stops the deliveries for key.
	Unsubscribe(key string)
}

// A Lister is a Backend that lists its keys (CapList), for operators.
type Lister interface {
	// ListLeases calls fn with the name of every lease held now whose name
	// begins with prefix, until fn returns false. A lease taken or
	// released meanwhile may come or not; memory must stay flat however
	// many there are.
	ListLeases(ctx context.Context, prefix string, fn func(key string) bool) error
	// ListRecords is ListLeases for the live records of a RecordStore.
	ListRecords(ctx context.Context, prefix string, fn func(key string) bool) error
}

// A RecordStore is a Backend that keeps Client.Records (CapClaims):
// short records beside the leases, in their own namespace, expiring by the
// store's clock. The methods are those of Records, less validation (keys
// are names as for leases; TTLs at least a millisecond).
type RecordStore interface {
	SetRecord(ctx context.Context, key, value string, ttl time.Duration) error
	GetRecord(ctx context.Context, key string) (value string, ok bool, err error)
	// ClaimRecord stores value for ttl only if key holds no live record.
	ClaimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error)
	// ClaimRecordWithin is Records.ClaimWithin: ClaimTaken if key holds a
	// live record; else ClaimLate, storing nothing, if the store's clock is
	// past planned+window; else it stores value for ttl or until just past
	// planned+window by the store's clock, whichever ends later, and
	// returns Claimed — all in one atomic step.
	// A store without a clock may judge by the claimer's clock read after
	// the store answered, if it keeps the claim past planned+window by a
	// bound on the claimers' clock skew and takes back a claim found late
	// (etcdlock, memcachelock).
	ClaimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (ClaimVerdict, error)
	// SetRecordIfNewer is Records.SetIfNewer: store unless key holds a
	// record stored with a greater order.
	SetRecordIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error)
}

// A QueueLeaver is a Backend with CapFair whose queued callers can leave
// a key's queue without releasing what their token holds.
//
// A caller that gives up waiting leaves the queue with Release of its
// token, which also deletes a lease of that token. Under a token of the
// Client's own that lease can only be a leftover of the caller's own
// attempts. Under a caller's token (WithToken) it may be another
// process's, one that shares the token and took the key just as this
// caller gave up: Release would delete it, and that holder would not be
// told. A Client calls Leave instead, on a backend that has it.
type QueueLeaver interface {
	// Leave takes token out of key's queue, if it is there, as Release
	// does, and changes nothing else: a lease of token stays. A key the
	// store handed to token that nobody has taken yet (a grant still to
	// be claimed) is passed on as Release would pass it on.
	Leave(ctx context.Context, key, token string) error
}

// New returns a Client whose leases live in b: a backend written outside
// this package (see Backend, and the backends under
// github.com/latchkey/latchkey/backends). The error is ErrInvalidOption
// (or ErrInvalidTTL) for a bad option, and for a nil b or one whose
// declared capabilities its methods do not back; WithReplicaAck is for
// Redis and is refused. Close closes b.
func New(b Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidOption)
	}
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	if c.cfg.ackN > 0 {
		return nil, fmt.Errorf("%w: WithReplicaAck is for Redis (this backend: %s)", ErrInvalidOption, b.Capabilities())
	}
	caps := b.Capabilities() &^ CapPrimitives // not offered to open backends yet
	ob := &openBackend{b: b, caps: caps}
	if caps&CapFair != 0 {
		ob.leaver, _ = b.(QueueLeaver)
	}
	var missing []string
	if caps&CapNotify != 0 {
		if ob.notify, _ = b.(Notifier); ob.notify == nil {
			missing = append(missing, "CapNotify without Notifier")
		}
	}
	if caps&CapList != 0 {
		if ob.list, _ = b.(Lister); ob.list == nil {
			missing = append(missing, "CapList without Lister")
		}
	}
	if caps&CapClaims != 0 {
		if ob.rec, _ = b.(RecordStore); ob.rec == nil {
			missing = append(missing, "CapClaims without RecordStore")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: backend %T declares %s", ErrInvalidOption, b, strings.Join(missing, ", "))
	}
	linger := time.Duration(0)
	if ob.notify != nil {
		linger = 2 * time.Second
	}
	c.setBackend(ob, linger, caps)
	ob.nt = c.nt
	ob.done = make(chan struct{})
	ob.subs = map[string]uint64{}
	return c, nil
}

// openBackend drives a Backend for the Client.
type openBackend struct {
	b      Backend
	caps   Capability
	notify Notifier
	list   Lister
	rec    RecordStore
	leaver QueueLeaver // nil unless the backend has it (and CapFair)
	nt     *notifier

	// A Subscribe that failed is retried in the background until it
	// succeeds, the channel is unsubscribed or the Client closes: the
	// notifier counts the channel subscribed (and sends no other
	// Subscribe), and its waiters wait for the confirmation each time
	// they join.
	mu        sync.Mutex
	subs      map[string]uint64 // channel → the subscription's id
	lastSub   uint64
	done      chan struct{} // closed by close
	closeOnce sync.Once
	retries   sync.WaitGroup
}

// errNoRecords is what a record call answers on a backend without
// RecordStore (Records checks the capability first; this is the backstop).
var errNoRecords = unsupported("Records", CapClaims)

func (o *openBackend) acquire(ctx context.Context, n names, token, value string, ttl time.Duration, fair, enqueue bool) (acquireResult, error) {
	if n.limit != 0 {
		return acquireResult{}, unsupported("semaphores and read-write locks", CapPrimitives)
	}
	_, meta, _ := strings.Cut(value, "|")
	fair = fair && o.caps&CapFair != 0
	r, err := o.b.Acquire(ctx, AcquireRequest{Key: n.lease, Token: token, Metadata: meta, TTL: ttl, Fair: fair, Enqueue: fair && enqueue})
	if err != nil {
		return acquireResult{}, err
	}
	if r.Acquired {
		return acquireResult{acquired: true, fence: r.Fence}, nil
	}
	return acquireResult{holderTTL: r.HolderTTL, queued: r.Queued && fair}, nil
}

// extendParallel bounds the renewals of one batch that run at once.
const extendParallel = 8

func (o *openBackend) extend(ctx context.Context, reqs []extendReq) {
	one := func(r *extendReq) {
		left, err := o.b.Extend(ctx, r.n.lease, r.token, r.ttl)
		switch {
		case errors.Is(err, ErrNotHeld):
		case err != nil:
			r.err = err
		default:
			r.ok, r.left = true, left
		}
	}
	if len(reqs) == 1 {
		one(&reqs[0])
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, extendParallel)
	for i := range reqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			one(&reqs[i])
		}()
	}
	wg.Wait()
}

func (o *openBackend) release(ctx context.Context, n names, token string) (bool, error) {
	ok, err := o.b.Release(ctx, n.lease, token)
	if ok && err == nil && o.notify == nil {
		// No notifications from the store: this process's waiters are
		// woken here, others find the key free at their next poll.
		o.nt.deliver(n.lease, "r:")
	}
	return ok, err
}

func (o *openBackend) canLeave(names) bool { return o.leaver != nil }

func (o *openBackend) leave(ctx context.Context, n names, token string) error {
	return o.leaver.Leave(ctx, n.lease, token)
}

func (o *openBackend) inspect(ctx context.Context, n names) (Info, error) {
	return o.b.Inspect(ctx, n.lease)
}

func (o *openBackend) holds(context.Context, names, names) (holdsInfo, error) {
	return holdsInfo{}, nil
}

func (o *openBackend) subscribe(ctx context.Context, channel string) error {
	if o.notify == nil { // nothing to wait for: waiters poll
		o.nt.confirm(channel)
		return nil
	}
	o.mu.Lock()
	o.lastSub++
	id := o.lastSub
	o.subs[channel] = id
	o.mu.Unlock()
	err := o.notify.Subscribe(ctx, channel, o.deliverer(channel))
	if err == nil {
		o.nt.confirm(channel)
		return nil
	}
	o.retries.Add(1)
	go o.resubscribe(channel, id)
	return err
}

// deliverer is the deliver func of channel's subscription.
func (o *openBackend) deliverer(channel string) func(string) {
	return func(token string) {
		if token == "" {
			o.nt.deliver(channel, "r:")
			return
		}
		o.nt.deliver(channel, grantPrefix+token)
	}
}

// resubscribe retries the failed subscription id of channel, with
// backoff, until it takes effect (and is confirmed), another subscription
// or an unsubscribe replaces it, or the Client closes.
func (o *openBackend) resubscribe(channel string, id uint64) {
	defer o.retries.Done()
	current := func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.subs[channel] == id
	}
	backoff := 50 * time.Millisecond
	for {
		t := time.NewTimer(backoff)
		select {
		case <-o.done:
			t.Stop()
			return
		case <-t.C:
		}
		if !current() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		go func() { // Close ends the attempt
			select {
			case <-o.done:
			case <-ctx.Done():
			}
			cancel()
		}()
		err := o.notify.Subscribe(ctx, channel, o.deliverer(channel))
		cancel()
		if err == nil {
			o.mu.Lock()
			_, live := o.subs[channel]
			cur := o.subs[channel] == id
			o.mu.Unlock()
			switch {
			case cur:
				o.nt.confirm(channel)
			case !live: // unsubscribed meanwhile, and not subscribed again
				o.notify.Unsubscribe(channel)
			}
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (o *openBackend) unsubscribe(channels ...string) {
	if o.notify == nil {
		return
	}
	o.mu.Lock()
	for _, ch := range channels {
		delete(o.subs, ch)
	}
	o.mu.Unlock()
	for _, ch := range channels {
		o.notify.Unsubscribe(ch)
	}
}

// announce tells this process's observers (Campaign's new leader); those
// of other processes see it at their next poll.
func (o *openBackend) announce(_ context.Context, channel, payload string) error {
	o.nt.deliver(channel, payload)
	return nil
}

func (o *openBackend) close() {
	o.closeOnce.Do(func() { close(o.done) })
	o.retries.Wait() // no Subscribe after the backend's Close
	_ = o.b.Close()
}

func (o *openBackend) setRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	if o.rec == nil {
		return errNoRecords
	}
	return o.rec.SetRecord(ctx, key, value, ttl)
}

func (o *openBackend) getRecord(ctx context.Context, key string) (string, bool, error) {
	if o.rec == nil {
		return "", false, errNoRecords
	}
	return o.rec.GetRecord(ctx, key)
}

func (o *openBackend) claimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if o.rec == nil {
		return false, errNoRecords
	}
	return o.rec.ClaimRecord(ctx, key, value, ttl)
}

func (o *openBackend) claimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, plannedMs, windowMs int64) (verdict, error) {
	if o.rec == nil {
		return 0, errNoRecords
	}
	return o.rec.ClaimRecordWithin(ctx, key, value, ttl, time.UnixMilli(plannedMs), time.Duration(windowMs)*time.Millisecond)
}

func (o *openBackend) setRecordNewer(ctx context.Context, key, _, value string, order int64, ttl time.Duration) (bool, error) {
	if o.rec == nil {
		return false, errNoRecords
	}
	return o.rec.SetRecordIfNewer(ctx, key, value, order, ttl)
}

// scanNames serves Client.Scan ("<prefix>:{*") and Records.Scan
// ("<prefix>:{<p>*}:rec") from the Lister: the literal part of the
// pattern before its '*' is the prefix asked for.
func (o *openBackend) scanNames(ctx context.Context, pattern string, fn func(string) bool) error {
	if o.list == nil {
		return unsupported("listing keys", CapList)
	}
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		star = len(pattern)
	}
	prefix := globUnescape(pattern[:star])
	if strings.HasSuffix(pattern, "}:rec") {
		return o.list.ListRecords(ctx, prefix, func(key string) bool {
			if !strings.HasSuffix(key, "}:rec") {
				return true
			}
			return fn(key)
		})
	}
	return o.list.ListLeases(ctx, prefix, fn)
}

// globUnescape undoes globEscape.
func globUnescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var _ backend = (*openBackend)(nil)
