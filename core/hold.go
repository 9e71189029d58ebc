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

// renewed records the outcome of a watchdog renewal sent at sent.
func (c *Client) renewed(l *lease, sent time.Time, ok bool, err error) {
	l.mu.Lock()
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	switch {
	case err == nil && ok:
		l.renewErr = nil
		if e := sent.Add(l.ttl); e.After(l.expires) {
			l.expires = e
		}
		l.mu.Unlock()
		c.wd.schedule(l, nextDue(l, sent))
	case err == nil:
		l.mu.Unlock()
		l.markLost(lostError(l.key, errors.New("lease expired or taken over")))
	default:
		// Report the most telling failure: a timeout near the expiry says
		// less than the error that started the trouble.
		if l.renewErr == nil || !errors.Is(err, context.DeadlineExceeded) {
			l.renewErr = err
		}
		cause := l.renewErr
		retry := time.Now().Add(retryDelay(l.ttl))
		expires := l.expires
		l.mu.Unlock()
		if retry.Before(expires) {
			c.wd.schedule(l, retry)
			return
		}
		l.markLost(lostError(l.key, fmt.Errorf("renewal failed until expiry: %w", cause)))
	}
}

// extend renews l by hand (Lock.Extend).
func (c *Client) extend(ctx context.Context, l *lease, ttl time.Duration) (err error) {
	if obs := c.cfg.observer; obs != nil {
		var end func(OpResult)
		ctx, end = obs.OpStart(ctx, OpExtend, l.key)
		defer func() { end(OpResult{Err: err, Fence: l.fence}) }()
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q: released", ErrNotHeld, l.key)
	}
	l.mu.Unlock()
	sent := time.Now()
	req := []extendReq{{n: l.n, token: l.token, ttl: ttl}}
	c.be.extend(ctx, req)
	if err := req[0].err; err != nil {
		return fmt.Errorf("core: extend %q: %w", l.key, err)
	}
	if !req[0].ok {
		err := fmt.Errorf("%w: %q: lease expired or taken over", ErrNotHeld, l.key)
		l.markLost(lostError(l.key, err))
		return err
	}
	l.mu.Lock()
	lost := l.lostErr
	if lost == nil {
		l.ttl = ttl
		l.expires = sent.Add(ttl)
	}
	l.mu.Unlock()
	if lost != nil { // reported lost while the extension was under way
		return lost
	}
	c.wd.schedule(l, nextDue(l, sent))
	return nil
}

// release drops one hold of l and, with the last, deletes the lease.
func (c *Client) release(ctx context.Context, l *lease) (err error) {
	l.mu.Lock()
	l.holds--
	nested := l.holds > 0
	if !nested {
		l.released = true
	}
	lost := l.lostErr != nil
	l.mu.Unlock()
	if obs := c.cfg.observer; obs != nil {
		var end func(OpResult)
		ctx, end = obs.OpStart(ctx, OpRelease, l.key)
		defer func() {
			end(OpResult{Err: err, Fence: l.fence, Held: time.Since(l.start), Lost: lost, Reentered: nested})
		}()
	}
	if nested {
		return nil
	}
	c.wd.remove(l)

	if ctx.Done() != nil { // detach from the caller's cancellation
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
	}
	ok, err := c.be.release(ctx, l.n, l.token)
	if err != nil {
		return fmt.Errorf("core: release %q: %w", l.key, err)
	}
	if !ok {
		return fmt.Errorf("%w: %q: lease expired or taken over", ErrNotHeld, l.key)
	}
	return nil
}

// releaseQuietly deletes a lease nobody will release any more.
func (c *Client) releaseQuietly(ctx context.Context, l *lease) {
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, _ = c.be.release(ctx, l.n, l.token)
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
