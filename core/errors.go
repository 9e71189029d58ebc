package core

import "errors"

// Errors returned by this package. Match them with errors.Is: every error
// that ends a wait also carries its cause, so errors.Is finds both
// ErrNotAcquired and context.DeadlineExceeded (or the Redis error) in it.
//
// ErrNotAcquired means contention (someone else holds the key); a Redis
// failure is ErrUnavailable with the Redis error, never ErrNotAcquired.
var (
	// ErrNotAcquired: the key is held by someone else (TryLock), or a wait
	// ended (ctx, WithWaitTimeout, WithRetryBudget) while it still was.
	ErrNotAcquired = errors.New("core: lock not acquired")

	// ErrNotHeld: Release or Extend found that the lease no longer carries
	// this handle's token — it expired, or another owner holds it now. The
	// new owner is never disturbed.
	ErrNotHeld = errors.New("core: lock not held")

	// ErrLost: the lease ended while its holder still relied on it (renewal
	// found it gone or could not reach the server before it expired).
	// context.Cause of a Do callback's context is ErrLost (wrapped with the
	// reason), and Do returns an error matching it.
	ErrLost = errors.New("core: lock lost")

	// ErrInvalidKey: the key is empty, longer than MaxKeyLen bytes, or
	// starts with '}' (which would break the Redis Cluster hash tag).
	ErrInvalidKey = errors.New("core: invalid key")

	// ErrInvalidTTL: a TTL under one millisecond.
	ErrInvalidTTL = errors.New("core: invalid ttl")

	// ErrInvalidOption: an option value that cannot work (an empty key
	// prefix, a malformed token, a negative budget or timeout).
	ErrInvalidOption = errors.New("core: invalid option")

	// ErrNilClient: NewRedis or NewRedlock was given a nil Redis client.
	ErrNilClient = errors.New("core: nil redis client")

	// ErrUnavailable: the backend could not be reached or failed, so the
	// operation got no answer. The backend's own error is kept with it
	// (errors.Is finds both, and ctx's error when ctx ended first). It is
	// never contention: an outage is not ErrNotAcquired.
	ErrUnavailable = errors.New("core: backend unavailable")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("core: client closed")

	// ErrReplicaAck: with WithReplicaAck, fewer replicas than required
	// acknowledged a lease write in time. An acquisition that gets it has
	// released the lease again; a renewal retries while the lease lasts.
	ErrReplicaAck = errors.New("core: replicas did not acknowledge")

	// ErrUnsupported: the Client's backend lacks a capability the call
	// needs (see Capability and Client.Require): WithFair without
	// CapFair, Records without CapClaims, Scan without CapList, a
	// Semaphore without CapPrimitives. It matches errors.ErrUnsupported
	// too; an option that needs it also matches ErrInvalidOption.
	ErrUnsupported error = unsupportedError{}
)

// unsupportedError is ErrUnsupported: it matches errors.ErrUnsupported too.
type unsupportedError struct{}

func (unsupportedError) Error() string        { return "core: not supported by this backend" }
func (unsupportedError) Is(target error) bool { return target == errors.ErrUnsupported }
