package core

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/internal/errjoin"
)

// A Client takes locks on one backend: a Redis server, Sentinel group or
// Cluster (NewRedis), several independent Redis masters (NewRedlock), or
// process memory (NewMemory). It is safe for concurrent use; create one per
// backend and share it. It owns one renewal goroutine and one notification
// subscription, started on first use and stopped by Close.
type Client struct {
	cfg  clientConfig
	be   backend
	caps Capability
	nt   *notifier
	wd   watchdog
	ts   *turnstiles // Redlock's: see turnstiles

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	attempts  sync.RWMutex // read-held by each acquisition attempt; Close waits for them
}

// newClient applies opts; the error is the first invalid one.
func newClient(opts []Option) (*Client, error) {
	c := &Client{cfg: clientConfig{prefix: DefaultKeyPrefix, lock: defaultSettings()}, done: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o.applyClient(&c.cfg)
		}
	}
	switch {
	case c.cfg.err != nil:
		return nil, c.cfg.err
	case c.cfg.lock.err != nil:
		return nil, c.cfg.lock.err
	case c.cfg.lock.token != "":
		return nil, fmt.Errorf("%w: WithToken is per lock", ErrInvalidOption)
	case c.cfg.lock.ttl < time.Millisecond:
		return nil, fmt.Errorf("%w: %v (want at least 1ms)", ErrInvalidTTL, c.cfg.lock.ttl)
	}
	c.wd.init(c)
	return c, nil
}

// setBackend attaches the backend, what it offers, and its notifier.
func (c *Client) setBackend(be backend, linger time.Duration, caps Capability) {
	c.be, c.caps = be, caps
	c.nt = newNotifier(be, linger)
}

// prepare validates a lock call and returns its settings.
func (c *Client) prepare(ctx context.Context, key string, opts []LockOption) (settings, error) {
	select {
	case <-c.done:
		return settings{}, ErrClosed
	default:
	}
	if err := validKey(key); err != nil {
		return settings{}, err
	}
	s := c.cfg.lock
	if len(opts) > 0 {
		s = withOptions(s, opts)
	}
	if s.err != nil {
		return settings{}, s.err
	}
	if s.ttl < time.Millisecond {
		return settings{}, fmt.Errorf("%w: %v (want at least 1ms)", ErrInvalidTTL, s.ttl)
	}
	// Redis counts whole milliseconds: a lease is never believed longer
	// than the server keeps it.
	s.ttl = s.ttl.Truncate(time.Millisecond)
	if s.margin >= s.ttl {
		return settings{}, fmt.Errorf("%w: drift margin %v is not below the ttl %v", ErrInvalidOption, s.margin, s.ttl)
	}
	if s.fair && c.caps&CapFair == 0 {
		return settings{}, unsupported("WithFair", CapFair)
	}
	if ctx.Err() != nil { // never reached the server: not contention
		return settings{}, fmt.Errorf("core: acquire %q: %w", key, context.Cause(ctx))
	}
	return s, nil
}

// withOptions returns s with opts applied. (Apart from prepare, so that a
// call without options does not pay for the settings escaping to the heap
// through the options' interface.)
func withOptions(s settings, opts []LockOption) settings {
	for _, o := range opts {
		if o != nil {
			o.applyLock(&s)
		}
	}
	return s
}

// TryLock makes one attempt to acquire key. It returns ErrNotAcquired if
// someone else holds it, and ErrUnavailable with the backend's error (never
// ErrNotAcquired) if the attempt did not get an answer — with ctx's error
// too when ctx ended first, so errors.Is finds each. An answer that comes
// after the lease's TTL (less the drift margin) has run out, counted from
// the send, is ErrUnavailable too: the key may have expired and passed to
// someone else before it came, so it makes no lock, and the lease is given
// back. If ctx carries a lease of key from this Client (see
// Lock.WithContext), TryLock re-enters it.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, 0, opts, false)
}

// Lock acquires key, waiting while someone else holds it. A waiter sleeps
// until the holder's release notification (or, should one be missed, until
// no later than the holder's expiry) and then tries again. The wait ends
// with ctx, WithWaitTimeout or WithRetryBudget; the error then matches
// ErrNotAcquired and the cause (context.DeadlineExceeded, context.Canceled).
// WithWaitTimeout bounds the whole call, the first attempt included. A
// backend failure ends it at once with ErrUnavailable and the backend's
// error (never ErrNotAcquired: an attempt that got no answer says nothing
// about contention), as does an answer that came too late (see TryLock).
// If ctx carries a lease of key from this Client, Lock
// re-enters it.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, 0, opts, true)
}

// acquire is TryLock (wait false) and Lock (wait true) for limit 0, a
// semaphore's TryAcquire and Acquire for limit > 0 permits, and a
// read-write lock's holds for rwRead and rwWrite.
func (c *Client) acquire(ctx context.Context, key string, limit int, opts []LockOption, wait bool) (h *Lock, err error) {
	s, err := c.prepare(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if limit != 0 {
		if err := c.checkPrimitive(&s, limit); err != nil {
			return nil, err
		}
	}
	s.kind = kindOf(limit, s.kind)
	if wait && s.waitTimeout > 0 { // the bound covers the first attempt too
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.waitTimeout,
			fmt.Errorf("wait timeout %v: %w", s.waitTimeout, context.DeadlineExceeded))
		defer cancel()
	}
	var st acquireStats
	if obs := c.cfg.observer; obs != nil {
		var end func(OpResult)
		ctx, end = obs.OpStart(ctx, OpAcquire, key, s.kind)
		defer func() {
			r := OpResult{Err: err, Attempts: st.attempts, Wait: st.wait, Reentered: st.reentered}
			if h != nil {
				r.Fence = h.l.fence
			}
			end(r)
		}()
	}
	if limit == 0 {
		if h := c.reenter(ctx, key); h != nil {
			st.reentered = true
			return h, nil
		}
	}
	n := c.kindNames(key, limit)
	n.given = s.token != ""
	tok := s.token
	if tok == "" {
		tok = rand.Text()
	}
	start := time.Now()
	var p *pass
	if wait && c.ts != nil && limit == 0 && s.token == "" && s.retryBudget < 0 {
		// One of this Client's callers at a time tries for the key (see
		// turnstiles); a caller with a retry budget does not queue, so
		// that the budget bounds its wait.
		if p, err = c.ts.enter(ctx, c.done, n.lease); err != nil {
			st.wait = time.Since(start)
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, err)
		}
		defer func() {
			var took *lease
			if h != nil {
				took = h.l
			}
			p.leave(took)
		}()
	}
	var holderTTL time.Duration
	sibling := false // the key is held by this Client: wait for its release first
	if p != nil && p.held != nil {
		holderTTL, sibling = p.held.heldFor()
	}
	var hr hearing
	if !sibling {
		if _, redis := c.be.(*redisBackend); redis && wait && limit == 0 {
			// Its release scripts publish every release after an
			// attempt that found the key held and marked it.
			hr = c.nt.hearing(n.lease)
		}
		st.attempts = 1
		h, holderTTL, err = c.attempt(ctx, key, n, tok, &s, wait)
		if h != nil || err != nil {
			if p != nil && p.queued {
				st.wait = time.Since(start)
			}
			return h, err
		}
		if !wait {
			return nil, fmt.Errorf("%w: %q", ErrNotAcquired, key)
		}
	}
	if p == nil || !p.queued {
		start = time.Now()
	}
	if obs := c.cfg.observer; obs != nil {
		_, end := obs.OpStart(ctx, OpWait, key, s.kind) // its context is not used
		defer func() { end(OpResult{Err: err, Attempts: st.attempts, Wait: st.wait}) }()
	}
	var held *lease
	if sibling {
		held = p.held
	}
	h, err = c.wait(ctx, key, n, tok, &s, holderTTL, held, hr, &st)
	st.wait = time.Since(start)
	return h, err
}

// kindOf is the Kind of an acquisition of limit (see acquire); a mutex
// is a lock unless set (a Campaign's leadership).
func kindOf(limit int, set Kind) Kind {
	switch {
	case limit > 0:
		return KindPermit
	case limit == rwRead:
		return KindRead
	case limit == rwWrite:
		return KindWrite
	case set != "":
		return set
	}
	return KindLock
}

// acquireStats describe an acquisition for the Observer.
type acquireStats struct {
	attempts  int
	wait      time.Duration
	reentered bool
}

// wait is Lock's slow path: the key was held at the first attempt.
//
// held, if not nil, is a lease of this Client on the key when it made no
// attempt yet: it first waits for that lease's release, unless the lease
// ended before the subscription was in place.
func (c *Client) wait(ctx context.Context, key string, n names, tok string, s *settings, holderTTL time.Duration, held *lease, hr hearing, st *acquireStats) (*Lock, error) {
	fail := func(cause error) (*Lock, error) {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, cause)
	}
	acquired := false
	n.waited = true
	queued := s.fair || n.limit == rwWrite // a waiting writer is recorded too
	// Leave the queue; if a grant came meanwhile, pass it on.
	defer func() {
		if queued && !acquired {
			c.leaveQueue(ctx, n, tok)
		}
	}()
	start := time.Now()
	w := c.nt.join(ctx, n.lease, tok)
	var offer *handOffer // while it may be handed the key (handOver)
	// take returns the lock a hand-over's outcome hands it, if any; after
	// a failed one it goes on with a new token (takeHanded).
	take := func(o handOutcome) *Lock {
		h, retoken := c.takeHanded(offer, o)
		if retoken {
			tok = rand.Text()
			c.nt.retoken(w, tok)
		}
		return h
	}
	defer func() {
		if o := c.nt.leave(w, acquired); offer != nil && (o.h != nil || o.err != nil) {
			c.dropHanded(ctx, offer, o) // a hand-over that came as it left
		}
		if acquired && n.limit == rwRead {
			// One release wakes one waiter per Client; readers share, so
			// the one that got in wakes the next.
			c.nt.wakeNext(n.lease)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleepFirst := false
	for retries := 0; ; retries++ {
		if s.retryBudget >= 0 && retries >= s.retryBudget {
			return fail(fmt.Errorf("retry budget of %d exhausted", s.retryBudget))
		}
		// The first retry follows join at once (a release may have come
		// before the subscription), unless the attempt queued naming the
		// grant channel: a grant then reaches this waiter whenever it came
		// (the notifier keeps one that came before the waiter joined).
		if retries == 0 && held != nil && c.nt.heard(n.lease) {
			// A release from here on wakes it: if the lease still
			// lives, there is nothing to try for until then.
			holderTTL, sleepFirst = held.heldFor()
		} else if retries == 0 && held == nil && !queued && c.nt.quietSince(n.lease, hr) {
			// Its first attempt found the key held (and marked it), made
			// while notifications were heard, and none came since: a
			// release after that attempt wakes a waiter of this Client,
			// or hands it the key; there is nothing to try for until
			// then.
			sleepFirst = true
		}
		if retries > 0 || s.named || sleepFirst {
			d := fallbackDelay(holderTTL, queued)
			if _, ok := c.be.(toucher); ok && queued && n.limit == 0 {
				d = touchDelay(holderTTL)
			}
			if c.caps&CapNotify == 0 {
				d = pollDelay(retries, holderTTL)
			}
			if !queued && c.canQueue(n) {
				// Come back when starving, to queue: while waiters queue,
				// a release grants the key to the first of them and wakes
				// nobody else.
				if left := starvationThreshold() - time.Since(start); left > 0 {
					d = min(d, left+time.Millisecond)
				} else {
					d = 0
				}
			}
			timer.Reset(d)
			due := time.Now().Add(d)
			woken, hinted := false, false
			if offer = c.handOfferFor(ctx, key, n, tok, s, queued); offer != nil {
				c.nt.offer(w, offer)
			}
		sleep:
			for {
				select {
				case o := <-w.handed:
					// A release of this Client handed it the key, or
					// released it the usual way, or failed: it attempts
					// then.
					if h := take(o); h != nil {
						acquired = true
						return h, nil
					}
					woken = true
					break sleep
				case <-w.wake:
					woken = true
					break sleep
				case <-w.next:
					// Next in line: the key was granted to the waiter
					// ahead; look again once its claim window has passed
					// (a head that died leaves the key free then) — but
					// never later than planned: hints may keep coming
					// (see lib_wait.lua), and a waiter that never looks
					// never keeps its place either.
					if h := fairClaim + jitter(fairClaim/10); time.Until(due) > h {
						if !timer.Stop() {
							select {
							case <-timer.C:
							default:
							}
						}
						timer.Reset(h)
						due = time.Now().Add(h)
					}
					hinted = true
				case <-timer.C:
					break sleep
				case <-ctx.Done():
					if h := c.handedAlready(w, offer); h != nil {
						acquired = true
						return h, nil
					}
					return fail(context.Cause(ctx))
				case <-c.done:
					if h := c.handedAlready(w, offer); h != nil {
						acquired = true // Close tells it lost, as any lock
						return h, nil
					}
					return nil, ErrClosed
				}
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			if offer != nil {
				// No hand-over from here on: one under way ends first.
				o, took, err := c.nt.withdraw(ctx, w)
				if err != nil {
					return fail(err)
				}
				if took {
					if h := take(o); h != nil {
						acquired = true
						return h, nil
					}
					woken = true
				}
			}
			if !woken && !hinted && queued && n.limit == 0 {
				// A queued mutex waiter that heard nothing keeps its
				// place with a short call, and attempts only when that
				// says it could succeed (a lost notification, say). One
				// told it is next in line attempts: the grant ahead of it
				// may have lapsed.
				if t, ok := c.be.(toucher); ok {
					if ttl, try, err := t.touch(ctx, n, tok); err == nil && !try {
						holderTTL = ttl
						retries--
						continue
					}
				}
			}
		}
		if !queued && time.Since(start) >= starvationThreshold() && c.canQueue(n) {
			// Starving: from now on this waiter queues, and the key is
			// handed over in arrival order until the queue drains.
			s.fair, queued = true, true
		}
		st.attempts++
		h, ttl, err := c.attempt(ctx, key, n, tok, s, true)
		if err != nil {
			if ctx.Err() != nil { // the wait ended during a retry: the key was held at the last answer
				return fail(context.Cause(ctx))
			}
			return nil, err
		}
		if h != nil {
			acquired = true
			return h, nil
		}
		holderTTL = ttl
		queued = queued || s.fair // it joined waiters already queued
	}
}

// A toucher is a backend whose queued mutex waiters keep their place with
// a call cheaper than an attempt: touch returns the holder's remaining
// time, or attempt true when an attempt could succeed now.
type toucher interface {
	touch(ctx context.Context, n names, token string) (holderTTL time.Duration, attempt bool, err error)
}

// starvationThreshold is how long a waiter of the default (unfair) mode
// competes with newcomers before it queues, as a WithFair waiter does: a
// release then grants the key to the queue's head. As in Go's sync.Mutex,
// barging keeps short waits fast, and nobody waits behind a stream of
// luckier callers for long; and while waiters queue, a newcomer that will
// wait joins them at once (the key goes to them in arrival order anyway).
const starvationThresholdDefault = 50 * time.Millisecond

// starvation holds starvationThreshold, which the tests change (an atomic:
// a waiter of another test may still read it).
var starvation = func() (d atomic.Int64) {
	d.Store(int64(starvationThresholdDefault))
	return
}()

func starvationThreshold() time.Duration { return time.Duration(starvation.Load()) }

// canQueue reports whether waiters of n may queue: a mutex or a
// semaphore, on a backend with fair queues (not Redlock).
func (c *Client) canQueue(n names) bool {
	return n.limit >= 0 && c.caps&CapFair != 0
}

// maxFallback caps the sleep of a waiter whose notification went missing:
// the price of a lost notification (a reconnect) is at most this much wait.
const maxFallback = 5 * time.Second

// fallbackDelay is how long a waiter sleeps when no notification comes: up
// to the holder's expiry plus a little jitter, but at most about
// maxFallback (jittered down), so a lost notification costs little. A fair
// waiter comes back at least every fairPoll to keep its queue entry alive.
func fallbackDelay(holderTTL time.Duration, fair bool) time.Duration {
	limit := maxFallback
	if fair {
		limit = fairPoll
	}
	if holderTTL >= 0 && holderTTL < limit {
		return holderTTL + jitter(2*time.Millisecond)
	}
	return limit - jitter(limit/5)
}

// touchDelay is fallbackDelay for a queued mutex waiter that keeps its
// place with touches (toucher): up to the holder's expiry plus a little
// jitter, at most about touchPoll. It is told when it is next in line.
func touchDelay(holderTTL time.Duration) time.Duration {
	poll := touchPoll()
	if holderTTL >= 0 && holderTTL < poll {
		return holderTTL + jitter(2*time.Millisecond)
	}
	return poll - jitter(poll/5)
}

// Polling, on a backend without notifications (CapNotify): the first
// retry comes pollFirst after the first attempt, each next one twice as
// late up to pollMax, and never much past the holder's expiry; each delay
// is jittered between half and all of it, so that waiters spread out.
const (
	pollFirst = 4 * time.Millisecond
	pollMax   = 250 * time.Millisecond
)

// pollDelay is the delay before retry number retries (from 1) of a
// waiter that polls.
func pollDelay(retries int, holderTTL time.Duration) time.Duration {
	d := pollFirst << min(retries-1, 7)
	d = min(d, pollMax)
	if holderTTL >= 0 && holderTTL+time.Millisecond < d {
		d = holderTTL + time.Millisecond
	}
	return d/2 + jitter(d/2+1)
}

// leaveQueue takes a fair waiter that gives up out of the queue, releasing
// (and so passing on) a grant that reached it meanwhile. Under a token of
// the Client's own, that release deletes the lease of its token, if any
// (nobody else holds with it). Under a caller's token (WithToken), a lease
// of the token may be another process's, one that claimed the grant: the
// waiter only leaves the queue, passing on a grant not claimed yet, where
// the backend can (queueLeaver); elsewhere leases of the token in this
// Client are told first, as a Release tells its twins.
func (c *Client) leaveQueue(ctx context.Context, n names, tok string) {
	if ql, ok := c.be.(queueLeaver); ok && n.given && ql.canLeave(n) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		_ = ql.leave(ctx, n, tok)
		return
	}
	id := leaseID{n.lease, tok}
	for _, t := range c.wd.releaseToken(id) {
		t.markLost(lostError(t.key, errors.New("released by a waiter of its token that gave up")))
		t.waitHeal()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, _ = c.be.release(ctx, n, tok)
	c.wd.released(id)
}

// attempt tries once. It returns a handle, or the holder's TTL when held.
// A fair attempt joins the queue when enqueue is set.
func (c *Client) attempt(ctx context.Context, key string, n names, tok string, s *settings, enqueue bool) (*Lock, time.Duration, error) {
	value := tok
	if s.metadata != "" {
		value = tok + "|" + s.metadata
	}
	// Close waits for attempts under way before it closes the backend, so
	// that their leases are registered (and released by Close) or given
	// back here.
	c.attempts.RLock()
	defer c.attempts.RUnlock()
	select {
	case <-c.done:
		return nil, 0, ErrClosed
	default:
	}
	var tk *tokenTicket
	if s.token != "" { // a release of the token may undo it: see watchdog.add
		tk = c.wd.watchToken(leaseID{n.lease, tok})
		defer c.wd.unwatchToken(tk)
	}
	start := time.Now()
	r, err := c.be.acquire(ctx, n, tok, value, s.ttl, s.fair, enqueue)
	if err != nil {
		// A client that honours ctx's deadline (ContextTimeoutEnabled) sets it
		// on the socket: the read may time out a moment before ctx's own
		// timer fires — on a busy machine, well after the deadline. Let it
		// fire (bounded), so that the cause is reported.
		if d, ok := ctx.Deadline(); ok && time.Until(d) < 5*time.Millisecond {
			t := time.NewTimer(max(time.Until(d), 0) + 100*time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = errjoin.Join(err, cause)
		}
		// The script may have run before the call failed (a timeout after
		// the send): take back whatever this token may hold, so the key is
		// not stranded until its TTL.
		if s.token == "" { // a token of its own: nobody else's lease is touched
			c.forget(context.WithoutCancel(ctx), n, tok)
		}
		return nil, 0, fmt.Errorf("%w: acquire %q: %w", ErrUnavailable, key, err)
	}
	if !r.acquired {
		if r.queued { // it joined the waiters already queued: fair from now on
			s.fair = true
		}
		s.named = r.named
		return nil, r.holderTTL, nil
	}
	if err := tooLate(key, start, s); err != nil {
		if s.token == "" {
			c.forget(context.WithoutCancel(ctx), n, tok)
		}
		return nil, 0, err
	}
	h, err := c.register(ctx, key, n, tok, r.fence, s, start, tk)
	if err != nil {
		return nil, 0, err
	}
	return h, 0, nil
}

// tooLate is the error of an acquisition of key, sent at start, whose
// answer came when the lease it made had no time left by the Client's
// reckoning (its TTL less the drift margin, counted from start): the key
// may have expired and been taken by another caller before the answer
// came, so it makes no lock. The lease is given back by the caller, as
// after any failed call. It is generic so that the key is boxed for
// the error alone, not on every acquisition.
func tooLate[K string | []string](key K, start time.Time, s *settings) error {
	margin := s.margin
	if margin < 0 {
		margin = driftMargin(s.ttl)
	}
	if took := time.Since(start); took >= s.ttl-margin {
		return fmt.Errorf("%w: acquire %q: %w: %v after the call, the lease's TTL %v",
			ErrUnavailable, key, errLateAnswer, took.Round(time.Millisecond), s.ttl)
	}
	return nil
}

// errLateAnswer is tooLate's cause, under ErrUnavailable.
var errLateAnswer = errors.New("the answer came too late")

// register makes the handle of a lease just acquired (sent at start) and
// hands the lease to the watchdog; if the Client was closed meanwhile, it
// gives the lease back and returns ErrClosed. An acquisition with a token
// of the caller's (tk) that a release of the same token may have undone
// (see watchdog.add) makes no lock: ErrNotAcquired, and the
// server's lease, if any, is left to its TTL (a twin may share it). The
// caller holds c.attempts.
func (c *Client) register(ctx context.Context, key string, n names, tok string, fence int64, s *settings, start time.Time, tk *tokenTicket) (*Lock, error) {
	// The lease and its first handle in one allocation.
	first := &struct {
		l lease
		h Lock
	}{l: lease{
		c: c, key: key, n: n, token: tok, fence: fence, meta: s.metadata, kind: s.kind, start: start,
		ttl: s.ttl, margin: s.margin, autoRenew: s.autoRenew, holds: 1, counterBy: start.Add(fenceRetention),
	}}
	l := &first.l
	first.h.l = l
	if c.cfg.observer != nil { // ctx is the one the Observer returned
		l.obsCtx = context.WithoutCancel(ctx)
	}
	if !c.wd.add(l, tk) {
		if tk != nil && tk.void {
			return nil, fmt.Errorf("%w: %q: a release of token %q was under way", ErrNotAcquired, key, tok)
		}
		c.releaseQuietly(context.WithoutCancel(ctx), l) // closed meanwhile
		return nil, ErrClosed
	}
	return &first.h, nil
}

// forget releases, in the background and bounded, a lease an acquisition
// that failed may have left under its fresh token.
func (c *Client) forget(ctx context.Context, n names, tok string) {
	f := func() {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, _ = c.be.release(ctx, n, tok)
	}
	if !c.wd.goCounted(f) {
		f()
	}
}

// Do acquires key like Lock, runs fn with a context that carries the lease
// (nested lock calls of key re-enter it), and releases the lock when fn
// returns or panics. If the lease is lost while fn runs, fn's context is
// cancelled with a cause matching ErrLost (see context.Cause) and Do
// returns an error matching ErrLost, joined with fn's own error; as
// Lock.Err does, the context's Err finds the lease lost from its deadline
// on, even when the timer that cancels the context runs late, and so it
// does for the leases of the Do calls this one runs in. A context fn
// derives from it (context.WithTimeout, say), and its Done channel, learn
// of the loss when the timer runs: check the context Do hands fn, or
// Lock.Err, between writes. Otherwise Do returns fn's error, joined with
// a release failure if there was one.
func (c *Client) Do(ctx context.Context, key string, fn func(context.Context) error, opts ...LockOption) (err error) {
	return c.do(ctx, key, 0, fn, opts)
}

// do is Do for limit 0, and a semaphore's Do for limit > 0 permits.
func (c *Client) do(ctx context.Context, key string, limit int, fn func(context.Context) error, opts []LockOption) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil func", ErrInvalidOption)
	}
	h, err := c.acquire(ctx, key, limit, opts, true)
	if err != nil {
		return err
	}
	inner, cancel := context.WithCancelCause(h.WithContext(ctx))
	runCtx := leaseContext{inner, h.l}
	stop := h.l.notifyLost(cancel)
	defer func() {
		stop()
		cancel(nil)
		relErr := h.Release(ctx)
		if lost := h.Err(); lost != nil {
			if !errors.Is(err, ErrLost) {
				err = errjoin.Join(err, lost)
			}
			return
		}
		if errors.Is(relErr, ErrNotHeld) {
			// It expired between renewals without the watchdog noticing yet.
			relErr = lostError(key, relErr)
		}
		err = errjoin.Join(err, relErr)
	}()
	return fn(runCtx)
}

// A leaseContext is the context Do hands its callback, cancelled when the
// lease is lost. Its Err asks the leases the context carries first
// (lease.lapsed): its own, and those of the Do calls it is nested in, whose
// loss cancels it too. So a callback that checks it between writes is told
// of a passed deadline even while the deadline timer is late; Done waits
// for the timer.
type leaseContext struct {
	context.Context
	l *lease
}

func (c leaseContext) Err() error {
	b, _ := c.Context.Value(bindKey{}).(*binding)
	if b == nil { // not bound by Do (never so): its own lease
		b = &binding{l: c.l}
	}
	for ; b != nil; b = b.next {
		b.l.mu.Lock()
		b.l.lapsed()
	}
	return c.Context.Err()
}

// Inspect tells an operator who holds key: the mutex's token, metadata,
// fence and remaining TTL, its fair waiters, and in Holds the permits of
// the key's Semaphore and the holds of its RWMutex (with WritersWaiting).
// It reads without changing anything.
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if err := validKey(key); err != nil {
		return Info{}, err
	}
	info, err := c.be.inspect(ctx, c.names(key))
	if err != nil {
		return Info{}, fmt.Errorf("%w: inspect %q: %w", ErrUnavailable, key, err)
	}
	hi, err := c.be.holds(ctx, c.semNames(key, 1), c.kindNames(key, rwWrite))
	if err != nil {
		return Info{}, fmt.Errorf("%w: inspect %q: %w", ErrUnavailable, key, err)
	}
	info.Holds, info.WritersWaiting, info.PermitWaiters = hi.holds, hi.writers, hi.permitWaiters
	info.WriterOldestWait, info.PermitOldestWait = hi.writerAge, hi.permitAge
	info.Key = key
	return info, nil
}

// Close stops the Client: waits end with ErrClosed, renewals stop, the
// notification subscription ends, and every lease still held is reported
// lost at once (Lost closes; under Do the callback's context is cancelled)
// wherever its renewal is. Auto-renewed leases are then released (best
// effort, bounded, and as Release would: a Redis mutex lease or write hold
// that another process re-entered under its token since stays); those
// taken with WithAutoRenew(false) stay on the server for the TTL their
// holder chose. Release and Extend of a lease taken before Close return an
// error matching ErrClosed. Close does not close the Redis clients given
// to the constructor. Calling it again does nothing, and so does Close on
// a nil *Client (what a failed constructor returns).
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		close(c.done)
		c.attempts.Lock() // attempts under way finish; later ones see done
		//lint:ignore SA2001 a barrier: waiting for the readers is the point
		c.attempts.Unlock()
		kept := c.wd.shutdown()
		c.nt.close()
		for _, l := range kept {
			l.mu.Lock()
			l.closed = true
			l.mu.Unlock()
			l.markLost(lostError(l.key, ErrClosed))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32) // releases in parallel, a few at a time
		for _, l := range kept {
			if !l.autoRenew { // a lease without renewal keeps the TTL its holder chose
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				c.releaseQuietly(ctx, l)
			}()
		}
		wg.Wait()
		c.wd.wait()
		c.be.close()
	})
	return nil
}
