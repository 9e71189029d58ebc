package etcdlock

import (
	"time"

	"github.com/latchkey/latchkey/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WithClock sets the clock a Client reads for Records.ClaimWithin.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock = now }
}

// Backend is the core.Backend New wraps, for tests that drive Acquire,
// Release and Subscribe themselves, as core does, to see exactly which
// process a release wakes.
type Backend interface {
	core.Backend
	core.Notifier
}

// NewBackend returns the backend New would wrap (with default options).
func NewBackend(cli *clientv3.Client) Backend {
	return newBackend(cli, newConfig(nil))
}

// QueuePrefix is the prefix of the queue entries of the lease named key.
func QueuePrefix(key string) string { return queuePrefix(key) }
