package zklock

import "time"

// WithSweepEvery sets how often a Client deletes expired records.
func WithSweepEvery(d time.Duration) Option {
	return func(c *config) { c.sweepEvery = d }
}
