package core

import (
	"context"
	"fmt"
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
// waiter gives up with the error, and its token, never used again, is
// released unfenced, as after a failed acquisition (Client.forget).

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
// watchdog) before the waiter hears of it, under c.attempts as an
// attempt: Close, which waits for attempts, then finds it and releases
// it, whichever comes first.
func (c *Client) handOver(ctx context.Context, l *lease, fence int64) (tried, ok bool, err error) {
	ho, can := c.be.(handOverer)
	if !can || l.kind != KindLock || !ho.canHandOver(l.n) {
		return false, false, nil
	}
	c.attempts.RLock()
	select {
	case <-c.done:
		c.attempts.RUnlock()
		return false, false, nil
	default:
	}
	w, to, found := c.nt.reserve(l.n.lease)
	if !found {
		c.attempts.RUnlock()
		return false, false, nil
	}
	sent := time.Now()
	handed, released, err := ho.handOver(ctx, l.n, l.token, fence, to.value, to.s.ttl)
	o := handOutcome{err: err}
	if handed != 0 {
		o.h = c.makeHanded(&to, handed, sent)
	}
	delivered := c.nt.settle(w, o)
	c.attempts.RUnlock()
	if !delivered { // the waiter left meanwhile
		c.dropHanded(ctx, &to, o)
	}
	return true, handed != 0 || released, err
}

// makeHanded makes the lock of the lease a hand-over (sent at sent) made
// for offer to, of fence; or nil, the lease given back, when it has no
// time left by the Client's reckoning or the Client was closed (the
// waiter then attempts, or finds the Client closed). The caller holds
// c.attempts.
func (c *Client) makeHanded(to *handOffer, fence int64, sent time.Time) *Lock {
	if tooLate(to.key, sent, &to.s) != nil {
		ctx := context.WithoutCancel(to.ctx)
		l := &lease{n: to.n, token: to.token}
		f := func() {
			ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
			defer cancel()
			_, _ = c.deleteLease(ctx, l, fence)
		}
		if !c.wd.goCounted(f) {
			f()
		}
		return nil
	}
	h, err := c.register(to.ctx, to.key, to.n, to.token, fence, &to.s, sent, nil)
	if err != nil { // closed meanwhile: register gave the lease back
		return nil
	}
	return h
}

// takeHanded returns the lock a hand-over's outcome o hands the waiter of
// offer to; nil and no error when o hands nothing (the key was released
// the usual way: the waiter attempts). A failed hand-over fails the wait:
// the waiter's token may hold the key, and is given up.
func (c *Client) takeHanded(to *handOffer, o handOutcome) (*Lock, error) {
	if o.err != nil {
		c.dropHanded(to.ctx, to, o)
		return nil, fmt.Errorf("%w: acquire %q: a release handing the key over failed: %w", ErrUnavailable, to.key, o.err)
	}
	return o.h, nil
}

// dropHanded gives back, in the background and bounded, what hand-over
// outcome o left to the waiter of offer to, which will not take it: its
// lock; or, when the call failed, whatever the waiter's token holds (a
// token used no more). The caller does not hold c.attempts.
func (c *Client) dropHanded(ctx context.Context, to *handOffer, o handOutcome) {
	switch {
	case o.h != nil:
		ctx := context.WithoutCancel(ctx)
		f := func() { _ = c.release(ctx, o.h.l) }
		if !c.wd.goCounted(f) {
			f()
		}
	case o.err != nil:
		c.forget(context.WithoutCancel(ctx), to.n, to.token)
	}
}
