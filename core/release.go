package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// releaseTimeout bounds a release that runs without the caller's
// cancellation (see Lock.Release).
const releaseTimeout = 5 * time.Second

// extend renews l by hand (Lock.Extend).
func (c *Client) extend(ctx context.Context, l *lease, ttl time.Duration) (err error) {
	if obs := c.cfg.observer; obs != nil {
		var end func(OpResult)
		ctx, end = obs.OpStart(ctx, OpExtend, l.key, l.kind)
		defer func() { end(OpResult{Err: err, Fence: l.fence}) }()
	}
	l.mu.Lock()
	closed, released, lost := l.closed, l.released, l.lostErr
	l.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%w: %q: the client was closed", ErrClosed, l.key)
	case lost != nil:
		return fmt.Errorf("%w: %q: %w", ErrNotHeld, l.key, lost)
	case released:
		return fmt.Errorf("%w: %q: released", ErrNotHeld, l.key)
	}
	sent := time.Now()
	l.mu.Lock()
	keep := l.keepCounter(sent, ttl)
	l.mu.Unlock()
	req := []extendReq{{n: &l.n, token: l.token, ttl: ttl, keep: keep}}
	c.be.extend(ctx, req)
	r := &req[0]
	if r.err != nil {
		return fmt.Errorf("%w: extend %q: %w", ErrUnavailable, l.key, r.err)
	}
	if !r.ok {
		err := fmt.Errorf("%w: %q: lease expired or taken over", ErrNotHeld, l.key)
		l.markLost(lostError(l.key, err))
		return err
	}
	l.confirm(sent, r.left)
	if keep {
		l.keptCounter(sent)
	}
	c.heal(ctx, l, r)
	l.mu.Lock()
	lost, closed = l.lostErr, l.closed
	if lost == nil {
		l.ttl = ttl
	}
	auto, renewing := l.autoRenew, l.renewing
	l.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: %q: the client was closed", ErrClosed, l.key)
	}
	if lost != nil { // reported lost while the extension was under way
		return lost
	}
	if auto && !renewing { // a renewal under way reschedules on its own
		c.wd.schedule(l, sent.Add(ttl/3))
	}
	return nil
}

// heal lets a Redlock backend re-create a confirmed lease on the nodes that
// had lost it, unless the lease was released meanwhile: the release waits
// for a heal under way (healMu), and a heal after it sees released.
func (c *Client) heal(ctx context.Context, l *lease, r *extendReq) {
	h, ok := c.be.(healer)
	if !ok || len(r.heal) == 0 {
		return
	}
	l.healMu.Lock()
	defer l.healMu.Unlock()
	l.mu.Lock()
	released := l.released || l.lostErr != nil
	ttl := l.ttl
	l.mu.Unlock()
	if !released {
		h.heal(ctx, l.n, l.value(), ttl, r.heal)
	}
}

// release drops one hold of l and, with the last, deletes the lease.
func (c *Client) release(ctx context.Context, l *lease) (err error) {
	l.mu.Lock()
	l.holds--
	nested := l.holds > 0
	if !nested {
		l.released = true
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	lost := l.lostErr != nil
	reported := l.reported // set with lostErr
	closed := l.closed
	viaTwin := l.viaTwin
	l.mu.Unlock()
	if obs := c.cfg.observer; obs != nil {
		var end func(OpResult)
		ctx, end = obs.OpStart(ctx, OpRelease, l.key, l.kind)
		defer func() {
			// The release of a lost lease ends after the Observer heard of
			// the loss (LeaseLost may still be running on the goroutine
			// that found it), so a caller back from Release or Do sees it
			// recorded, and the release's end never overtakes it.
			if reported != nil {
				<-reported
			}
			end(OpResult{Err: err, Fence: l.fence, Held: time.Since(l.start), Lost: lost, Reentered: nested})
		}()
	}
	if nested {
		return nil
	}
	if closed {
		return fmt.Errorf("%w: %q: Close already gave the lease up", ErrClosed, l.key)
	}
	twins := c.wd.remove(l)
	l.waitHeal() // a heal under way finishes first (it sees released after)
	// Leases of the same token in this Client (re-entered by WithToken)
	// share the server's lease this release deletes: they are told first.
	fence := l.fence
	for _, t := range twins {
		t.mu.Lock()
		t.viaTwin = true
		t.mu.Unlock()
		t.markLost(lostError(l.key, errors.New("released through another handle of its token")))
		t.waitHeal()
		fence = max(fence, t.fence)
	}

	if ctx.Done() != nil { // detach from the caller's cancellation
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
	}
	// Only the acquisition it ends, or one of its twins here (see
	// deleteLease); to a waiter of this Client if one offers (handOver).
	var tried, ok bool
	if len(twins) == 0 {
		tried, ok, err = c.handOver(ctx, l, fence)
	}
	if !tried {
		ok, err = c.deleteLease(ctx, l, fence)
	}
	c.wd.released(leaseID{l.n.lease, l.token})
	if err != nil {
		return fmt.Errorf("%w: release %q: %w", ErrUnavailable, l.key, err)
	}
	if !ok || viaTwin {
		// viaTwin: the release of a twin (it sent this lease's fence, the
		// higher) already deleted the lease, and may have left its mark,
		// which this release, sent with the same fence, finds: it is not
		// this handle's release (it was told it lost the lease then).
		return fmt.Errorf("%w: %q: lease expired or taken over", ErrNotHeld, l.key)
	}
	return nil
}

// deleteLease deletes l's lease on the server. A mutex lease or write hold,
// on a backend that can, goes only if no acquisition of its token after
// the one of fence took or re-entered it: a release that arrives late
// (held up in the network, or sent again after a timeout), or one of a
// process whose token another process re-entered since, leaves that later
// lease be.
func (c *Client) deleteLease(ctx context.Context, l *lease, fence int64) (bool, error) {
	if fr, fenced := c.be.(fencedReleaser); fenced && (l.n.limit == 0 || l.n.limit == rwWrite) {
		return fr.releaseFenced(ctx, l.n, l.token, fence)
	}
	return c.be.release(ctx, l.n, l.token)
}

// A fencedReleaser releases a mutex lease (or a read-write lock's write
// hold) of a token only if no acquisition of the token after the one of
// fence took or re-entered it (its fence counter is not above fence).
type fencedReleaser interface {
	releaseFenced(ctx context.Context, n names, token string, fence int64) (bool, error)
}

// releaseQuietly deletes a lease nobody will release any more.
func (c *Client) releaseQuietly(ctx context.Context, l *lease) {
	l.mu.Lock()
	l.released = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.waitHeal()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, _ = c.deleteLease(ctx, l, l.fence)
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
