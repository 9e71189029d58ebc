package memcachelock

import (
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
)

// DefaultNamespace begins the name of every memcached item a Client writes
// (WithNamespace).
const DefaultNamespace = "latchkey:"

// maxNamespaceLen bounds WithNamespace, so that an item's name (the
// namespace, a 43-byte hash and a 2-byte suffix) stays within memcached's
// 250 bytes.
const maxNamespaceLen = 64

// An Option configures New.
type Option func(*config)

// DefaultClockSkew is the bound on how far apart two Clients' clocks may
// be that Records.ClaimWithin assumes unless WithClockSkew says otherwise.
const DefaultClockSkew = time.Second

type config struct {
	ns    string
	skew  time.Duration
	clock func() time.Time
	core  []core.Option
	err   error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: memcachelock: "+format, append([]any{core.ErrInvalidOption}, args...)...)
	}
}

// WithNamespace sets the prefix of the memcached item names (default
// DefaultNamespace), to keep the locks apart from other data in a shared
// memcached, or two fleets apart that use the same lock names. It is 0 to
// 64 printable ASCII bytes without spaces (ErrInvalidOption otherwise).
// Every Client that shares a lock must use the same namespace and the same
// core.WithKeyPrefix.
func WithNamespace(ns string) Option {
	return func(c *config) {
		if len(ns) > maxNamespaceLen {
			c.fail("namespace of %d bytes: want at most %d", len(ns), maxNamespaceLen)
			return
		}
		for i := 0; i < len(ns); i++ {
			if ns[i] <= ' ' || ns[i] >= 0x7f {
				c.fail("namespace %q: want printable ASCII without spaces", ns)
				return
			}
		}
		c.ns = ns
	}
}

// WithClockSkew declares how far apart the clocks of any two Clients that
// claim the same records may be (default DefaultClockSkew), counting the
// difference of their rates against memcached's over a claim's life.
// Records.ClaimWithin (cronlock's tick claims) judges a claim late by the
// claiming Client's clock, and keeps each claim in memcached for that much
// longer past its deadline, so that no node whose clock is within skew of
// the claimer's finds the tick free while it still takes the claim in
// time (see the package documentation). A claim stays skew longer than it
// would otherwise; a larger skew costs nothing else. Negative is
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
	c := config{ns: DefaultNamespace, skew: DefaultClockSkew, clock: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}
