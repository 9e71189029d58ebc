package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A lease is one acquisition of a key, shared by the handles that re-enter it.
//
// Its belief deadline is the moment this process stops believing it holds
// the key: the send time of the last write the server confirmed (the
// acquisition, a renewal, an Extend) plus the time the server said the
// lease then had left, minus the drift margin. The server cannot let anyone
// else take the key before that moment, because it counted the same time
// from a later instant. A timer of the lease's own closes Lost at the
// deadline: no renewal, connection, batch, other lease or Close stands
// between the deadline and the holder being told. (An auto-renewed lease's
// timer starts with its first renewal, see arm; the watchdog loop that
// starts it does no I/O and is due a third of the TTL in, long before the
// deadline.) Confirmations only ever
// move the deadline forward.
type lease struct {
	c     *Client
	key   string
	n     names
	token string
	fence int64
	meta  string // WithMetadata
	kind  Kind
	start time.Time // when the acquisition was sent
	// obsCtx is the context the Observer returned for the acquisition,
	// without its cancellation (nil without an Observer).
	obsCtx context.Context

	mu        sync.Mutex
	ttl       time.Duration // asked of every renewal
	margin    time.Duration // fixed drift margin; <0: driftMargin of each interval
	autoRenew bool
	deadline  time.Time   // the belief deadline (see above)
	counterBy time.Time   // the key's fence counter lives at least until then (see keepCounter)
	timer     *time.Timer // fires expire at deadline
	holds     int         // handles not yet released
	released  bool        // the last hold was released (or Close gave it up)
	closed    bool        // Close took it away
	viaTwin   bool        // a release of another handle of its token deleted it (release)
	renewing  bool        // a watchdog renewal is out and not yet given up on
	renewErr  error       // the failure of the renewals since the last success
	// retryAlone: the last renewal failed on the server's error reply (not
	// for want of an answer), so the retry goes in a batch of its own
	// (watchdog.dispatch).
	retryAlone bool
	lostErr    error // non-nil once lost
	lostCh     chan struct{}
	signaled   bool                // lostCh is (to be) closed
	reported   chan struct{}       // closed once the Observer was told of the loss (nil: no loss, or no Observer)
	onLost     map[int]func(error) // called once when lost (Do's cancel)
	nextOn     int

	// healMu orders a Redlock heal (re-creating the lease on a node that
	// lost it) before the release: a heal runs only while the lease is not
	// released, and a release waits for a heal under way.
	healMu sync.Mutex

	// boxed is the lease's key and token as the renewal script's
	// arguments, boxed at its first renewal and kept: a batch's
	// arguments then cost no allocation per lease (with l.mu).
	boxed [2]any

	// watchdog bookkeeping, guarded by watchdog.mu
	co         *cohort // the cohort it waits in for its next renewal; nil when not scheduled
	ci         int     // its index in co.members
	registered bool    // in watchdog.live
	twin       *lease  // next lease of the same key and token in watchdog.live
}

// driftMargin is the default allowance for the holder's clock running
// slower than the server's over an interval d: 1% of d plus 2 ms, but at
// most a tenth of d (so very short TTLs stay usable).
func driftMargin(d time.Duration) time.Duration {
	return min(d/100+2*time.Millisecond, d/10)
}

// marginFor returns the margin subtracted from an interval d the server
// confirmed. Called with l.mu held.
func (l *lease) marginFor(d time.Duration) time.Duration {
	if l.margin >= 0 {
		return l.margin
	}
	return driftMargin(d)
}

// arm sets the first deadline, from the acquisition sent at l.start, and
// starts the timer.
//
// An auto-renewed lease gets its timer when its first renewal comes due, a
// third of its TTL in, long before its deadline (see armLocked): a lease
// released before that — the common short critical section — never pays
// for a runtime timer.
func (l *lease) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = l.start.Add(l.ttl - l.marginFor(l.ttl))
	if !l.autoRenew {
		l.armLocked()
	}
}

// armLocked starts the deadline timer if it is not running, with l.mu
// held.
func (l *lease) armLocked() {
	if l.timer == nil {
		l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
	}
}

// confirm records that the server, asked at sent, said the lease has left
// more time: the deadline moves to sent+left-margin if that is later.
func (l *lease) confirm(sent time.Time, left time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.lostErr != nil {
		return
	}
	if d := sent.Add(left - l.marginFor(left)); d.After(l.deadline) {
		l.deadline = d
		if l.timer == nil {
			l.armLocked()
		} else {
			l.timer.Reset(time.Until(d))
		}
	}
}

// keepCounter reports whether a renewal of l sent at sent, for ttl, must
// keep the key's fence counter alive too (extendReq.keep): l is a mutex
// lease or a write hold, and its counter could expire within two TTLs and
// a minute. Every script that sets the counter gives it fenceRetention at
// least, from when it runs (retentionFor, hold_counter in lib_fence.lua):
// so it lives until fenceRetention after l's acquisition was sent, or
// after the last renewal that kept it (counterBy), whatever else happened
// to it since. l.mu is held.
func (l *lease) keepCounter(sent time.Time, ttl time.Duration) bool {
	if l.n.limit != 0 && l.n.limit != rwWrite {
		return false
	}
	return !sent.Add(2*ttl + time.Minute).Before(l.counterBy)
}

// keptCounter records a renewal sent at sent that kept the counter alive
// (it succeeded).
func (l *lease) keptCounter(sent time.Time) {
	l.mu.Lock()
	if by := sent.Add(fenceRetention); by.After(l.counterBy) {
		l.counterBy = by
	}
	l.mu.Unlock()
}

// expire is the deadline timer: the lease is lost unless a confirmation
// moved the deadline meanwhile.
func (l *lease) expire() {
	l.mu.Lock()
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(l.deadline); wait > 0 { // moved after the timer fired
		if l.timer == nil {
			l.armLocked()
		} else {
			l.timer.Reset(wait)
		}
		l.mu.Unlock()
		return
	}
	l.lose(l.expiryCause())
}

// lapsed is what the holder's own questions (Lock.Err, Lock.Lost,
// Group.Lost, FenceFromContext, a re-entry, the Err of the context Do
// hands its callback) ask before they answer: a lease whose
// deadline has passed is lost now, whether or not its timer has fired. A
// runtime short of CPU runs timers late; a holder that asks is told
// anyway. It reports whether l is lost, and releases l.mu.
func (l *lease) lapsed() bool {
	if l.lostErr != nil {
		l.mu.Unlock()
		return true
	}
	if l.released || l.deadline.IsZero() || time.Now().Before(l.deadline) {
		l.mu.Unlock()
		return false
	}
	l.loseAs(l.expiryCause(), true)
	return true
}

// expiryCause is the error of a lease lost at its deadline (l.mu held).
func (l *lease) expiryCause() error {
	var cause error
	switch {
	case !l.autoRenew:
		cause = errors.New("ttl passed without renewal")
	case l.renewErr != nil:
		cause = fmt.Errorf("renewal failed until expiry: %w: %w", ErrUnavailable, l.renewErr)
	default:
		cause = errors.New("no answer to its renewal before it expired")
	}
	return lostError(l.key, cause)
}

// markLost records the loss of l once and tells everyone who asked.
func (l *lease) markLost(cause error) {
	l.mu.Lock()
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	l.lose(cause)
}

// lose is markLost with l.mu held (it unlocks it): the loss is recorded in
// the same critical section that decided it, so no confirmation can slip in
// between. Every signal the holder can see is given in that section too —
// Err's error, the cancellation of Do's context and a Group's Lost (the
// onLost funcs), then Lost's channel — so whoever finds the lease lost
// under l.mu (lapsed) finds every one of them given, and a goroutine that
// Lost's channel wakes finds Do's context done and the Group's Lost
// closed. The observer hears of it after, outside the lock, so that no
// observer can delay the signal: on the goroutine that found the loss (the
// deadline timer's, a renewal's).
func (l *lease) lose(cause error) { l.loseAs(cause, false) }

// loseAs is lose; found: a holder's question found the loss (lapsed), on
// whatever goroutine asked — the library's own among them (a coalescer's
// leader asks its callers' contexts): the observer is then called on a
// goroutine of its own, so that it neither runs inside the library's
// locks nor holds up the caller (one Close waits for; once Close has
// begun, on the caller's).
func (l *lease) loseAs(cause error, found bool) {
	l.lostErr = cause
	fns := l.onLost
	l.onLost = nil
	if l.timer != nil {
		l.timer.Stop()
	}
	for _, f := range fns {
		f(cause)
	}
	l.signaled = true
	if l.lostCh != nil {
		close(l.lostCh)
	}
	obs := l.c.cfg.observer
	if obs != nil {
		l.reported = make(chan struct{})
	}
	l.mu.Unlock()
	if obs == nil {
		return
	}
	report := func() {
		obs.LeaseLost(l.observerContext(), l.key, l.kind, l.fence, time.Since(l.start), cause)
		close(l.reported)
	}
	if found && l.c.wd.goCounted(report) { // Close waits for it
		return
	}
	report()
}

// notifyLost calls f when l is lost (at once if it already is). The
// returned func unregisters f (Do calls it when its callback returns, so
// nested Do calls on one lease do not pile up). f runs with l.mu held (see
// lose): it must not call into l — a context's cancel, a channel's close.
func (l *lease) notifyLost(f func(error)) (stop func()) {
	l.mu.Lock()
	if err := l.lostErr; err != nil {
		l.mu.Unlock()
		f(err)
		return func() {}
	}
	if l.onLost == nil {
		l.onLost = make(map[int]func(error))
	}
	id := l.nextOn
	l.nextOn++
	l.onLost[id] = f
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.onLost, id)
		l.mu.Unlock()
	}
}

// value is the lease's stored value: its token, or token|metadata.
func (l *lease) value() string {
	if l.meta == "" {
		return l.token
	}
	return l.token + "|" + l.meta
}

// observerContext returns the lease's context for the Observer.
func (l *lease) observerContext() context.Context {
	if l.obsCtx != nil {
		return l.obsCtx
	}
	return context.Background()
}

// ttlNow returns the TTL the lease's renewals ask for.
func (l *lease) ttlNow() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// waitHeal waits for a Redlock heal of l under way (see healMu): a
// barrier, so that a release is never undone by a heal sent before it.
func (l *lease) waitHeal() {
	l.healMu.Lock()
	//lint:ignore SA2001 a barrier: waiting for the holder is the point
	l.healMu.Unlock()
}

func lostError(key string, reason error) error {
	return fmt.Errorf("%w: %q: %w", ErrLost, key, reason)
}
