package etcdlock

import "time"

// WithClock sets the clock a Client reads for Records.ClaimWithin.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}
