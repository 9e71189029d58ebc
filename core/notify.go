package core

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The notifier multiplexes release notifications for all keys a Client
// waits on. Each waited-on key has one channel subscription, shared by the
// Client's waiters of that key; each notification wakes one waiter — the
// longest-waiting one that has no wake-up pending — so a release costs one
// retry per Client, not one per waiter. A woken waiter that gives up passes
// its wake-up on, so none is lost.
type notifier struct {
	sub    subscriber
	linger time.Duration // how long an idle subscription is kept

	mu     sync.Mutex
	chans  map[string]*channelState
	closed bool

	// grants, if set, is the channel on which this Client alone hears of
	// grants to its queued waiters ("g:<token>|<lease channel>"); granted
	// is set once its subscription is confirmed.
	grants  string
	granted atomic.Bool
	// gen counts interruptions of the subscriptions (see hearing).
	gen uint64

	// early holds grants that came before their waiter joined (it joins
	// after its first attempt queued it), by "<lease channel>|<token>",
	// with the time they came; join hands them over, sweep drops them
	// after fairClaim, when the grant has expired anyway.
	early map[string]time.Time
}

// grantChannel names the Client's grant channel, "<prefix>:grants:<id>"
// with a random id, and returns it.
func (n *notifier) grantChannel(prefix string) string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	n.grants = prefix + ":grants:" + hex.EncodeToString(b[:])
	return n.grants
}

// grantsReady reports whether grants on the grant channel are heard.
func (n *notifier) grantsReady() bool { return n.granted.Load() }

// heard reports whether notifications on channel are heard, and will be
// until a waiter that asks now joins: its subscription is confirmed and
// waiters are on it (an idle one may be swept before the waiter joins).
func (n *notifier) heard(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.chans[channel]
	if cs == nil || len(cs.waiters) == 0 {
		return false
	}
	select {
	case <-cs.ready:
		return true
	default:
		return false
	}
}

// subscriber is the part of a backend the notifier drives.
type subscriber interface {
	subscribe(ctx context.Context, channel string) error
	unsubscribe(channels ...string)
}

type channelState struct {
	waiters    []*waiter // in arrival order
	recent     [4]string // the last release notifications delivered (Redlock dedup)
	recentAt   [4]time.Time
	nextRecent int
	subscribed bool          // SUBSCRIBE sent
	ready      chan struct{} // closed once the subscription is confirmed
	idleSince  time.Time     // when waiters became empty
	msgs       uint64        // notifications delivered on it (see hearing)
}

type waiter struct {
	channel string
	token   string        // the waiter's token, to route fair grants
	wake    chan struct{} // capacity 1: a pending wake-up
	next    chan struct{} // capacity 1: the waiter is next in line (a grant went to the one ahead)
	watch   bool          // an observer: woken by every message, never handed a release

	// A hand-over (Client.handOver), under the notifier's mu: offer is
	// set while the waiter sleeps between attempts and may be handed the
	// lease; reserved while a release of this Client is handing it over,
	// whose outcome then comes on handed (capacity 1), always; gone once
	// the waiter left while reserved: the releaser gives back a lease it
	// handed.
	offer    *handOffer
	reserved bool
	gone     bool
	handed   chan handOutcome
}

// handOffer is what a release needs to hand a waiter the key: the
// waiter's acquisition (its ctx, the Observer's, and settings) and the
// lease's value (its token, with its metadata).
type handOffer struct {
	ctx   context.Context
	key   string
	n     names
	token string
	value string
	s     settings
}

// handOutcome is a hand-over's result for its waiter: the lock it was
// handed; or err, when the call failed and the waiter's token may hold
// the key; or neither, when the release did not hand the key over.
type handOutcome struct {
	h   *Lock
	err error
}

// confirmWait bounds how long a new waiter waits for its subscription to be
// confirmed before it retries anyway (it then relies on its fallback timer).
const confirmWait = 500 * time.Millisecond

func newNotifier(sub subscriber, linger time.Duration) *notifier {
	return &notifier{sub: sub, linger: linger, chans: make(map[string]*channelState)}
}

// join registers a waiter on channel and returns once notifications on it
// flow (or confirmWait passed, or ctx ended). The caller must retry its
// acquisition after join: a release may have happened before the
// subscription took effect.
func (n *notifier) join(ctx context.Context, channel, token string) *waiter {
	return n.add(ctx, &waiter{channel: channel, token: token, wake: make(chan struct{}, 1), next: make(chan struct{}, 1), handed: make(chan handOutcome, 1)})
}

// offer lets w be handed the lease of its channel from now on (it sleeps
// until its next attempt, which withdraws the offer).
func (n *notifier) offer(w *waiter, o *handOffer) {
	n.mu.Lock()
	w.offer = o
	n.mu.Unlock()
}

// withdraw ends w's offer before it attempts, and returns the outcome of
// a hand-over to w (took true) if one came or is under way: it waits for
// the latter. If ctx ends first, w is gone (the releaser gives back what
// it hands w), and withdraw returns ctx's cause.
func (n *notifier) withdraw(ctx context.Context, w *waiter) (o handOutcome, took bool, err error) {
	n.mu.Lock()
	w.offer = nil
	reserved := w.reserved
	n.mu.Unlock()
	if !reserved {
		select {
		case o := <-w.handed: // settled before the offer was withdrawn
			return o, true, nil
		default:
			return handOutcome{}, false, nil
		}
	}
	select {
	case o := <-w.handed:
		return o, true, nil
	case <-ctx.Done():
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.reserved {
		w.gone = true
		return handOutcome{}, false, context.Cause(ctx)
	}
	return <-w.handed, true, nil // settled meanwhile
}

// abandon ends w's offer for a waiter whose wait is over (its ctx ended,
// or the Client closed), without waiting: it returns the outcome of a
// hand-over to w that settled (took true); one still under way finds w
// gone, and its releaser gives back what it hands w before its handOver
// returns (so before Close, which waits for it, reports any lock). Decided
// under the lock settle takes, so a settled lock is always either the
// waiter's or given back, never both nor neither.
func (n *notifier) abandon(w *waiter) (o handOutcome, took bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.offer = nil
	if w.reserved {
		w.gone = true
		return handOutcome{}, false
	}
	select {
	case o = <-w.handed:
		return o, true
	default:
		return handOutcome{}, false
	}
}

// A hearing is taken before a caller's first attempt at a key: the key's
// channel, if notifications on it were heard then, and how many had been
// delivered on it.
type hearing struct {
	cs   *channelState
	msgs uint64
	gen  uint64 // the notifier's interruptions then
}

// hearing returns channel's hearing now; the zero hearing if its
// subscription is not confirmed.
func (n *notifier) hearing(channel string) hearing {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.chans[channel]
	if cs == nil {
		return hearing{}
	}
	select {
	case <-cs.ready:
		return hearing{cs: cs, msgs: cs.msgs, gen: n.gen}
	default:
		return hearing{}
	}
}

// interrupted records that notifications on channels (every channel, if
// none is named) may have gone unheard from now until they are heard
// again: a subscription's connection broke, or moved. A hearing taken
// before no longer says that nothing came, and those channels count as
// not heard (none is given, heard says false) until the client's new
// subscription of each is confirmed (go-redis subscribes every channel
// again when it reconnects; a moved one is subscribed afresh).
func (n *notifier) interrupted(channels ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gen++
	unheard := func(cs *channelState) {
		select {
		case <-cs.ready:
			cs.ready = make(chan struct{})
		default:
		}
	}
	if len(channels) == 0 {
		for _, cs := range n.chans {
			unheard(cs)
		}
		return
	}
	for _, ch := range channels {
		if cs := n.chans[ch]; cs != nil {
			unheard(cs)
		}
	}
}

// mayHaveMissed records that notifications may have gone unheard, on
// channels it cannot name: a hearing taken before no longer says that
// nothing came.
func (n *notifier) mayHaveMissed() {
	n.mu.Lock()
	n.gen++
	n.mu.Unlock()
}

// quietSince reports whether nothing was delivered on channel since h was
// taken, through the same subscription, uninterrupted (h not zero). A
// waiter that joined after an attempt made with h taken before it, and
// finds it so, missed no release after that attempt: one delivered before
// it joined would have been counted, and one delivered since wakes a
// waiter of its Client. (A connection that broke before its client
// noticed goes unseen here as it does for every waiter: it relies on its
// timer then.)
func (n *notifier) quietSince(channel string, h hearing) bool {
	if h.cs == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.chans[channel] == h.cs && h.cs.msgs == h.msgs && n.gen == h.gen
}

// reserve picks the longest-waiting waiter of channel that offers to be
// handed the lease, and reserves it: its offer and true. Every
// reservation is settled (settle).
func (n *notifier) reserve(channel string) (*waiter, handOffer, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cs := n.chans[channel]; cs != nil {
		for _, w := range cs.waiters {
			if !w.watch && w.offer != nil && !w.reserved && !w.gone && w.handed != nil && w.offer.ctx.Err() == nil {
				w.reserved = true
				return w, *w.offer, true
			}
		}
	}
	return nil, handOffer{}, false
}

// present reports whether w, reserved, waits yet (is not gone).
func (n *notifier) present(w *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !w.gone
}

// retoken changes the token w is known by (a waiter that gave its old one
// up).
func (n *notifier) retoken(w *waiter, token string) {
	n.mu.Lock()
	w.token = token
	n.mu.Unlock()
}

// settle ends w's reservation with o. It reports false if w has gone:
// what o hands w is then the releaser's to give back.
func (n *notifier) settle(w *waiter, o handOutcome) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.reserved = false
	if w.gone {
		return false
	}
	// Capacity 1: the waiter offers itself again only once it has taken
	// this outcome (withdraw, or its sleep), so no second one comes first.
	w.offer = nil
	w.handed <- o
	return true
}

// watch registers an observer of channel: its wake channel gets a signal
// (coalesced) on every message, and it never takes a release's wake-up
// from a waiter. Leave it with leave(w, true).
func (n *notifier) watch(ctx context.Context, channel string) *waiter {
	return n.add(ctx, &waiter{channel: channel, wake: make(chan struct{}, 1), watch: true})
}

func (n *notifier) add(ctx context.Context, w *waiter) *waiter {
	channel := w.channel
	n.mu.Lock()
	cs := n.chans[channel]
	if cs == nil {
		cs = &channelState{ready: make(chan struct{})}
		n.chans[channel] = cs
	}
	cs.waiters = append(cs.waiters, w)
	if k := channel + "|" + w.token; w.token != "" && !w.watch && n.early != nil {
		if _, ok := n.early[k]; ok {
			delete(n.early, k)
			w.wake <- struct{}{}
		}
	}
	send := !cs.subscribed && !n.closed
	cs.subscribed = true
	ready := cs.ready
	n.mu.Unlock()

	if send {
		// A failed SUBSCRIBE still counts as subscribed: the client keeps
		// the channel and subscribes it again when it reconnects (then
		// confirm closes ready), and sweep unsubscribes it when idle, so
		// the notifier's subscriptions always equal the client's. This
		// waiter meanwhile relies on its fallback timer.
		if err := n.sub.subscribe(ctx, channel); err != nil {
			return w
		}
	}
	select {
	case <-ready:
		return w
	default:
	}
	t := time.NewTimer(confirmWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
	}
	return w
}

// leave unregisters w. A waiter that did not acquire passes a pending
// wake-up on to the next waiter. It returns a hand-over's outcome that
// came and was not taken (a lease handed to w, which its caller gives
// back); one still under way is the releaser's to give back.
func (n *notifier) leave(w *waiter, acquired bool) (untaken handOutcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.offer = nil
	if w.reserved {
		w.gone = true
	} else if w.handed != nil {
		select {
		case untaken = <-w.handed:
		default:
		}
	}
	cs := n.chans[w.channel]
	if cs == nil {
		return
	}
	for i, x := range cs.waiters {
		if x == w {
			cs.waiters = append(cs.waiters[:i], cs.waiters[i+1:]...)
			break
		}
	}
	if !acquired && !w.watch && len(w.wake) > 0 {
		cs.wakeOne()
	}
	if len(cs.waiters) == 0 {
		cs.waiters = nil
		cs.idleSince = time.Now()
		if n.linger == 0 {
			delete(n.chans, w.channel)
		}
	}
	return untaken
}

// wakeNext wakes one more waiter on channel (a reader that got in: the
// next waiter of this Client may get in too — another reader does, a
// writer goes back to sleep and does not pass it on).
func (n *notifier) wakeNext(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cs := n.chans[channel]; cs != nil {
		cs.wakeOne()
	}
}

// confirm records that notifications on channel flow.
func (n *notifier) confirm(channel string) {
	if channel == n.grants && channel != "" {
		n.granted.Store(true)
		return
	}
	n.mu.Lock()
	if cs := n.chans[channel]; cs != nil {
		select {
		case <-cs.ready:
		default:
			close(cs.ready)
		}
	}
	n.mu.Unlock()
}

// grantPrefix starts the payload of a notification that a release granted
// the lease to the fair waiter whose token follows.
const grantPrefix = "g:"

// leaderPrefix starts the payload of a new leader's announcement (Campaign):
// it wakes observers only.
const leaderPrefix = "l:"

// deliver handles a notification on channel: a grant wakes its grantee (if
// it waits here); a release wakes one waiter. A single server publishes
// each release once, as "r:". Redlock's nodes each publish the same release
// with one nonce, "r:<nonce>", unique to that release: a nonce seen in the
// last second is that release again, and dropped. So every release wakes a
// waiter, and one release wakes one.
func (n *notifier) deliver(channel, payload string) {
	if channel == n.grants && channel != "" {
		n.deliverGrant(payload)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.chans[channel]
	if cs == nil {
		return
	}
	cs.msgs++
	for _, w := range cs.waiters {
		if w.watch {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
	if strings.HasPrefix(payload, leaderPrefix) { // for observers only
		return
	}
	if tok, ok := strings.CutPrefix(payload, grantPrefix); ok {
		cs.wakeToken(tok)
		return
	}
	if payload == "r:" { // a single server's release: never a repeat
		cs.wakeOne()
		return
	}
	now := time.Now()
	for i, p := range cs.recent {
		if p == payload && now.Sub(cs.recentAt[i]) < time.Second {
			return
		}
	}
	cs.recent[cs.nextRecent], cs.recentAt[cs.nextRecent] = payload, now
	cs.nextRecent = (cs.nextRecent + 1) % len(cs.recent)
	cs.wakeOne()
}

// nextPrefix starts a message on a Client's grant channel telling a
// queued waiter that it is next in line.
const nextPrefix = "n:"

// deliverGrant handles a message on the grant channel: "g:<token>|<lease
// channel>" wakes that waiter, and nobody else; "n:<token>|<lease
// channel>" tells that waiter it is next in line.
func (n *notifier) deliverGrant(payload string) {
	if rest, ok := strings.CutPrefix(payload, nextPrefix); ok {
		tok, lease, ok := strings.Cut(rest, "|")
		if !ok {
			return
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if cs := n.chans[lease]; cs != nil {
			for _, w := range cs.waiters {
				if w.token == tok && !w.watch && w.next != nil {
					select {
					case w.next <- struct{}{}:
					default:
					}
					return
				}
			}
		}
		return
	}
	tok, lease, ok := strings.Cut(strings.TrimPrefix(payload, grantPrefix), "|")
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if cs := n.chans[lease]; cs != nil && cs.wakeToken(tok) {
		return
	}
	// Its waiter has not joined yet (or has gone): keep it a moment.
	if n.early == nil {
		n.early = make(map[string]time.Time)
	}
	if len(n.early) < maxEarlyGrants {
		n.early[lease+"|"+tok] = time.Now()
	}
}

// maxEarlyGrants bounds the grants kept for waiters not yet joined.
const maxEarlyGrants = 4096

// wakeToken wakes the waiter (not an observer) whose token is tok, and
// reports whether there was one.
func (cs *channelState) wakeToken(tok string) bool {
	for _, w := range cs.waiters {
		if w.token == tok && !w.watch {
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return true
		}
	}
	return false
}

func (cs *channelState) wakeOne() {
	for _, w := range cs.waiters {
		if w.watch {
			continue
		}
		select {
		case w.wake <- struct{}{}:
			return
		default: // already has one pending; try the next
		}
	}
}

// sweep drops subscriptions idle for longer than linger. It unsubscribes
// under the lock, so a later join's SUBSCRIBE is always sent after it.
func (n *notifier) sweep(now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var drop []string
	for ch, cs := range n.chans {
		if len(cs.waiters) == 0 && now.Sub(cs.idleSince) >= n.linger {
			delete(n.chans, ch)
			if cs.subscribed {
				drop = append(drop, ch)
			}
		}
	}
	for k, at := range n.early {
		if now.Sub(at) >= fairClaim {
			delete(n.early, k)
		}
	}
	if len(drop) > 0 {
		n.sub.unsubscribe(drop...)
	}
}

// close stops new subscriptions.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
}
