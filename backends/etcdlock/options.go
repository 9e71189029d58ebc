package etcdlock

import (
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
)

// DefaultRequestTimeout bounds a call to etcd made with a context that has
// no deadline of its own (WithRequestTimeout).
const DefaultRequestTimeout = 5 * time.Second

// An Option configures New.
type Option func(*config)

// DefaultClockSkew is the bound on how far apart two Clients' clocks may
// be that Records.ClaimWithin assumes unless WithClockSkew says otherwise.
const DefaultClockSkew = time.Second

type config struct {
	timeout time.Duration
	notify  bool
	skew    time.Duration
	clock   func() time.Time
	core    []core.Option
	err     error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: etcdlock: "+format, append([]any{core.ErrInvalidOption}, args...)...)
	}
}

// WithRequestTimeout bounds each call to etcd whose context has no
// deadline (default DefaultRequestTimeout): etcd's client otherwise retries
// some calls for as long as the context lives. Zero or negative is
// core.ErrInvalidOption.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("request timeout %v: want a positive duration", d)
			return
		}
		c.timeout = d
	}
}

// WithNotify turns release notifications on or off (default on). On, each
// key that has waiters in this process is watched (one etcd watch per key,
// multiplexed on the client's connection), and a release or an expiry wakes
// them at once. Off, the Client does not declare core.CapNotify and its
// waiters poll, with backoff, never sleeping past the holder's expiry.
func WithNotify(on bool) Option {
	return func(c *config) { c.notify = on }
}

// WithClockSkew declares how far apart the clocks of any two Clients that
// claim the same records may be (default DefaultClockSkew), counting the
// difference of their rates against the etcd leader's over a claim's
// life. etcd has no clock a transaction can read, so Records.ClaimWithin
// (cronlock's tick claims) judges a claim late by the claiming Client's
// clock, and keeps each claim in etcd for that much longer past its
// deadline, so that no Client whose clock is within skew of the claimer's
// finds the tick free while it still takes the claim in time (see the
// package documentation). A claim stays skew longer than it would
// otherwise; a larger skew costs nothing else. Negative is
// core.ErrInvalidOption.
func WithClockSkew(skew time.Duration) Option {
	return func(c *config) {
		if skew < 0 {
			c.fail("clock skew %v: want zero or more", skew)
			return
		}
		c.skew = skew
	}
}

// WithClientOptions passes options to the core.Client New returns
// (core.WithTTL, core.WithKeyPrefix, core.WithObserver, …).
func WithClientOptions(opts ...core.Option) Option {
	return func(c *config) { c.core = append(c.core, opts...) }
}

func newConfig(opts []Option) config {
	c := config{timeout: DefaultRequestTimeout, notify: true, skew: DefaultClockSkew, clock: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}
