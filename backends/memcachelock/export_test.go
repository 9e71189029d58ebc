package memcachelock

import "time"

// ExpirySeconds is expirySeconds, for tests.
func ExpirySeconds(ttl time.Duration) (int32, error) { return expirySeconds(ttl) }

// ItemNames returns the names of the lease and fence counter items of the
// lock key (a Client with the default core.WithKeyPrefix) in namespace ns.
func ItemNames(ns, key string) (lease, fence string) {
	return (&backend{ns: ns}).itemNames("latchkey:{" + key + "}")
}

// LeaseExpiry decodes a lease item's value: the expiry in seconds it was
// last written with, and its fence.
func LeaseExpiry(v []byte) (exp int32, fence int64, err error) {
	l, err := decode(v)
	return l.exp, l.fence, err
}

// WithClock sets the clock a Client reads for Records.ClaimWithin.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}
