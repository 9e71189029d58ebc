package core

import (
	"context"
	"time"
)

// An Observer sees every lock operation of a Client — for tracing and
// metrics; package otel implements one. Its methods are called on the hot
// path, synchronously: they must be fast, must not block, and must be safe
// for concurrent use. Install one with WithObserver.
type Observer interface {
	// OpStart is called when op begins on key. The context it returns is
	// used for the operation's backend calls (so a span started here is the
	// parent of the Redis command spans); end is called exactly once with
	// the outcome. The context OpStart returns for a successful
	// acquisition (OpAcquire) belongs to the lease from then on, without
	// its cancellation: the watchdog's renewals of the lease (OpRenew)
	// start from it, and LeaseLost receives it — so per-lease state (an
	// acquire span) travels with the lease and needs no table.
	OpStart(ctx context.Context, op Op, key string) (context.Context, func(OpResult))
	// LeaseLost is called once when a held lease is lost, with the lease's
	// context (see OpStart), the reason (an error matching ErrLost) and how
	// long it had been held — right after the holder was told (Lost
	// closed, Do's context cancelled), so that no observer can delay the
	// holder's signal.
	LeaseLost(ctx context.Context, key string, fence int64, held time.Duration, cause error)
}

// Op names an observed operation.
type Op uint8

// The observed operations.
const (
	OpAcquire Op = iota + 1 // TryLock, Lock, or Do's acquisition, waiting included
	OpRelease               // Lock.Release, or Do's release
	OpExtend                // Lock.Extend
	OpRenew                 // a watchdog renewal
)

func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpExtend:
		return "extend"
	case OpRenew:
		return "renew"
	}
	return "unknown"
}

// OpResult is the outcome of an observed operation.
type OpResult struct {
	// Err is nil on success. For OpAcquire, contention is an error matching
	// ErrNotAcquired; a wait that ran out also matches
	// context.DeadlineExceeded.
	Err error
	// Fence is the lease's fence (OpAcquire on success, and the others).
	Fence int64
	// Attempts counts the acquisition attempts (OpAcquire).
	Attempts int
	// Wait is the time spent waiting for a held key (OpAcquire).
	Wait time.Duration
	// Held is how long the lease had been held (OpRelease).
	Held time.Duration
	// Lost is true for the release of a lease that had already been
	// reported lost through LeaseLost.
	Lost bool
	// Reentered is true for an acquisition that re-entered a lease this
	// Client already held, and for the release of such a handle: neither
	// changes how many leases are held.
	Reentered bool
}

// WithObserver installs an Observer on the Client (default none).
func WithObserver(o Observer) Option {
	return clientOption(func(c *clientConfig) { c.observer = o })
}
