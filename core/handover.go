package core

import (
	"context"
	"time"
)

// A hand-over passes a mutex's key from a holder straight to a waiter of
// the same Client, in the release's own call: the release script, instead
// of deleting the lease, makes it the waiter's (its value and TTL, and a
// fence of its own, as its acquisition of the free key would) when nobody
// queues for the key (release.lua). The waiter needs no call: it is told
// in-process, and holds from the moment the release was sent.
//
// It is for the default mode's waiters of a Redis mutex (Lock, Do) with a
// token of their own: a waiter offers itself while it sleeps between
// attempts (notifier.offer), and withdraws before it attempts, so a
// hand-over never races its own attempt. A release picks the longest-
// waiting waiter that offers, and reserves it; the waiter learns the
// outcome on its handed channel, always — the lease, that the key was
// released the usual way, or that the call failed. A waiter that leaves
// while reserved is gone: the releaser gives back what it handed it.
//
// Safety: the waiter's lease is reckoned from when the release was sent,
// before the script set its TTL, as an acquisition's is from its send; its
// fence is above the releaser's (fresh_fence, after the releaser's lease).
// A call that fails leaves the waiter's token perhaps holding the key: the
// token, never used again, is released unfenced, as after a failed
// acquisition (Client.forget), and the waiter goes on waiting with a new
// one (the releaser's own lease, if the call never ran, lives until its
// TTL, as after any failed release). A call go-redis sends again after a
// lost answer finds the lease its first run made (the waiter's value) and
// answers as that run did (release.lua): the outcome is the same.

// handOfferFor returns the offer a waiter of an acquisition of key (ctx,
// n, token tok, settings s) makes, or nil when it may not be handed the
// key: a hand-over is an acquisition of a plain mutex (not a Campaign's)
// by a waiter of the default mode that does not queue, with a token of its
// own, on a backend that can.
func (c *Client) handOfferFor(ctx context.Context, key string, n names, tok string, s *settings, queued bool) *handOffer {
	if queued || s.fair || n.limit != 0 || n.given || s.kind != KindLock {
		return nil
	}
	ho, ok := c.be.(handOverer)
	if !ok || !ho.canHandOver(n) {
		return nil
	}
	value := tok
	if s.metadata != "" {
		value = tok + "|" + s.metadata
	}
	return &handOffer{ctx: ctx, key: key, n: n, token: tok, value: value, s: *s}
}

// handOver releases l (of fence) by handing its key to a waiter of this
// Client, if one offers. tried is false when none did, or the backend
// cannot: the caller releases as usual. Else ok and err are the release's
// outcome, as deleteLease's.
//
// The releaser makes the waiter's lock (registers its lease with the
// watchdog) before the waiter hears of it, under c.attempts as an attempt
// does: Close, which waits for attempts, then finds it and releases it,
// whichever comes first. A waiter that left meanwhile (gone) never learns
// of the lease, nor does the Observer: it is given back quietly.
func (c *Client) handOver(ctx context.Context, l *lease, fence int64) (tried, ok bool, err error) {
	ho, can := c.be.(handOverer)
	if !can || l.kind != KindLock || !ho.canHandOver(l.n) {
		return false, false, nil
	}
	c.attempts.RLock()
	defer c.attempts.RUnlock()
	select {
	case <-c.done:
		return false, false, nil
	default:
	}
	w, to, found := c.nt.reserve(l.n.lease)
	if !found {
		return false, false, nil
	}
	sent := time.Now()
	handed, released, err := ho.handOver(ctx, l.n, l.token, fence, to.value, to.s.ttl)
	o := handOutcome{err: err}
	switch {
	case handed == 0:
	case !c.nt.present(w) || tooLate(to.key, sent, &to.s) != nil:
		// Gone, or no time left by the Client's reckoning: the waiter
		// attempts, if it waits yet.
		c.giveBack(to.ctx, to.n, to.token, handed, nil)
	default:
		h, rerr := c.register(to.ctx, to.key, to.n, to.token, handed, &to.s, sent, nil)
		if rerr == nil { // else closed meanwhile: register gave it back
			o.h = h
		}
	}
	if !c.nt.settle(w, o) { // the waiter left meanwhile
		c.dropHanded(to.ctx, &to, o)
	}
	return true, handed != 0 || released, err
}

// giveBack deletes, in the background and bounded, the lease of fence
// that a hand-over made for token of n (lock l, if it was made, is first
// taken from the watchdog), telling nobody: no caller ever held it.
func (c *Client) giveBack(ctx context.Context, n names, token string, fence int64, l *lease) {
	if l != nil {
		l.mu.Lock()
		l.released = true
		if l.timer != nil {
			l.timer.Stop()
		}
		l.mu.Unlock()
		c.wd.remove(l)
	} else {
		l = &lease{n: n, token: token, fence: fence}
	}
	ctx = context.WithoutCancel(ctx)
	f := func() {
		ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
		l.waitHeal()
		_, _ = c.deleteLease(ctx, l, fence)
		c.wd.released(leaseID{n.lease, token})
	}
	if !c.wd.goCounted(f) {
		f()
	}
}

// takeHanded returns the lock a hand-over's outcome o hands the waiter of
// offer to; nil when o hands nothing (the key was released the usual way,
// or the call failed: the waiter attempts). After a failed call the
// waiter's token may hold the key: it is given back, and retoken is true:
// the waiter goes on with a new token.
func (c *Client) takeHanded(to *handOffer, o handOutcome) (h *Lock, retoken bool) {
	if o.err != nil {
		c.dropHanded(to.ctx, to, o)
		return nil, true
	}
	return o.h, false
}

// dropHanded gives back, in the background and bounded, what hand-over
// outcome o left to the waiter of offer to, which will not take it: its
// lock, quietly (no caller ever held it); or, when the call failed,
// whatever the waiter's token holds (a token used no more).
func (c *Client) dropHanded(ctx context.Context, to *handOffer, o handOutcome) {
	switch {
	case o.h != nil:
		c.giveBack(ctx, to.n, to.token, o.h.l.fence, o.h.l)
	case o.err != nil:
		c.forget(context.WithoutCancel(ctx), to.n, to.token)
	}
}

// handedAlready returns the lock a hand-over handed w (of offer to), if
// its outcome came: a waiter whose wait ends at that moment takes it (the
// lock was made; giving it back could race Close's report of it to the
// Observer). Else nil: an outcome of a failed call gives the token's lease
// back, and a hand-over still under way finds w gone (notifier.abandon)
// and gives back what it hands w itself.
func (c *Client) handedAlready(w *waiter, to *handOffer) *Lock {
	if to == nil {
		return nil
	}
	o, took := c.nt.abandon(w)
	switch {
	case !took:
	case o.h != nil:
		return o.h
	case o.err != nil:
		c.dropHanded(to.ctx, to, o)
	}
	return nil
}
