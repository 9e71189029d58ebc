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
	// kind is what the operation's lease holds (a lock, a permit, …).
	OpStart(ctx context.Context, op Op, key string, kind Kind) (context.Context, func(OpResult))
	// LeaseLost is called once when a held lease is lost, with the lease's
	// context (see OpStart), the reason (an error matching ErrLost) and how
	// long it had been held — right after the holder was told (Lost
	// closed, Do's context cancelled), so that no observer can delay the
	// holder's signal, and before the lease's release ends: Release and Do
	// return, and OpRelease's end is called, only once LeaseLost has
	// returned. So LeaseLost must not release the lease it reports. It
	// runs on the goroutine that found the loss, a timer's or a
	// renewal's, or — when a holder's question (Lock.Err, Lock.Lost, the
	// Err of Do's context, …) found the lease past its deadline first — on
	// a goroutine of its own. It should be fast and take no lock a holder
	// may hold.
	LeaseLost(ctx context.Context, key string, kind Kind, fence int64, held time.Duration, cause error)
}

// Op names an observed operation.
type Op uint8

// The observed operations.
const (
	OpAcquire Op = iota + 1 // TryLock, Lock, or Do's acquisition, waiting included
	OpRelease               // Lock.Release, or Do's release
	OpExtend                // Lock.Extend
	OpRenew                 // a watchdog renewal
	// OpWait is the waiting part of an acquisition (OpAcquire): it starts
	// when the first attempt found the key held, and ends, inside the
	// acquisition, when the caller got the key or gave up (Err, Attempts
	// and Wait as OpAcquire's). The context OpStart returns for it is not
	// used: the acquisition's own carries on. Waiters now are the waits started and not
	// yet ended.
	OpWait
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
	case OpWait:
		return "wait"
	}
	return "unknown"
}

// Kind names what a lease holds. Its values are also Hold.Kind's.
type Kind string

// The kinds of lease.
const (
	KindLock   Kind = "lock"   // a mutex: TryLock, Lock, Do, LockAll
	KindPermit Kind = "permit" // a Semaphore's permit
	KindRead   Kind = "read"   // an RWMutex's read hold
	KindWrite  Kind = "write"  // an RWMutex's write hold
	KindLeader Kind = "leader" // a Campaign's leadership
)

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

// WithObserver installs an Observer on the Client (default none; a nil
// Observer, typed or not, installs none).
func WithObserver(o Observer) Option {
	return clientOption(func(c *clientConfig) {
		if isNil(o) {
			o = nil
		}
		c.observer = o
	})
}
