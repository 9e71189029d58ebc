package temporallock

import (
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
	"go.temporal.io/sdk/activity"
)

// Defaults used when no option says otherwise.
const (
	// DefaultWaitTimeout is the longest a keyed activity waits for its key
	// when WithWaitTimeout is not given. The activity's own timeouts bound
	// the wait further (see WithWaitTimeout).
	DefaultWaitTimeout = time.Minute

	// KeyPrefix is put before every key a KeyFunc returns, so the lock key
	// of key K is "temporal:K" on the core.Client (and "<client
	// prefix>:{temporal:K}" in Redis). Other latchkey users of the same
	// Redis cannot collide with it by accident.
	KeyPrefix = "temporal:"

	// MaxKeyLen is the longest key a KeyFunc may return, in bytes: the
	// core limit less KeyPrefix.
	MaxKeyLen = core.MaxKeyLen - len(KeyPrefix)
)

// A KeyFunc maps an activity execution to the key of the lock it must run
// under. info is the activity's activity.Info; args are its arguments,
// already decoded to the types of the activity function's parameters
// (without the leading context.Context), as interceptor.ExecuteActivityInput
// holds them — for a dynamic activity, a single converter.EncodedValues.
//
// ok false means the activity is not keyed and runs without a lock. ok true
// means it runs under the lock of key; a key that is empty, longer than
// MaxKeyLen, not UTF-8 or with control characters then fails the activity
// with ErrTypeInvalidKey instead of running it unlocked. Executions whose
// keys are equal never overlap (with WithLimit(n): at most n run at once),
// on any worker sharing the lock backend.
//
// A KeyFunc runs on the worker before every attempt; it must be quick and
// must not do I/O. It may be called concurrently. If it panics, the
// attempt fails as a panicking activity does.
type KeyFunc func(info activity.Info, args []any) (key string, ok bool)

// An Option configures NewInterceptor. Options are sealed: only this
// package makes them.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	key      KeyFunc
	wait     time.Duration
	failFast bool
	lockOpts []core.LockOption
	limit    int // > 1: a core.Semaphore of limit permits per key
	observer Observer
	err      error // the first invalid option
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithKey sets the function that decides which activities run under a lock
// and under which key. It is required: without it (or with a nil fn)
// NewInterceptor returns ErrNoKey. Given twice, the last one wins; combine several with
// FirstKey.
func WithKey(fn KeyFunc) Option {
	return optionFunc(func(c *config) { c.key = fn })
}

// WithWaitTimeout bounds how long a keyed activity waits for a key that
// another execution holds (default DefaultWaitTimeout). The wait is bounded
// further by half the time left before the activity's deadline
// (StartToClose/ScheduleToClose), so the activity keeps at least half its
// time to run, and by half its HeartbeatTimeout when it has one, since the
// interceptor sends no heartbeats while it waits: a waiting attempt hears
// of its activity's cancellation only when the wait ends, about as soon as
// a heartbeating activity would. A wait that ends without the key fails
// the attempt with ErrTypeBusy and Temporal's retry policy takes over. Zero means no waiting: the same as WithFailFast. A negative
// d is ErrInvalidOption.
func WithWaitTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail(fmt.Errorf("%w: negative wait timeout %v", ErrInvalidOption, d))
			return
		}
		c.wait = d
		c.failFast = d == 0
	})
}

// WithFailFast makes a keyed activity whose key is held fail at once with
// ErrTypeBusy, without waiting, leaving the retry to Temporal's retry
// policy (default: wait, see WithWaitTimeout). This:
//
//	temporallock.WithFailFast()
//
// is equivalent to:
//
//	temporallock.WithWaitTimeout(0)
func WithFailFast() Option {
	return optionFunc(func(c *config) { c.wait, c.failFast = 0, true })
}

// WithLimit lets up to n executions of one key run at once across every
// worker sharing the lock backend, instead of one: a cluster-wide
// concurrency limit per key ("at most 5 Charge activities per merchant").
// Each execution holds a permit of a core.Semaphore with the lock's
// guarantees — renewal, a fence that rises with every permit, the
// activity's context cancelled when its permit is lost — and a full key
// waits (WithWaitTimeout) or fails with the retryable ErrTypeBusy
// (WithFailFast), as a held lock does. Waiting executions get permits in
// arrival order with core.WithFair (WithLockOptions), and without it an
// execution that has waited 50 ms queues, so none starves. n is 1 to
// core.MaxSemaphoreLimit; 1, the default, is the lock. With n > 1, nested
// core.Client lock calls of LockKeyFromContext's key do not re-enter the
// permit. The Client's backend must offer core.CapPrimitives (core.NewRedis,
// core.NewMemory); on any other — core.NewRedlock, or a backend given to
// core.New such as backends/sqllock — NewInterceptor returns
// ErrInvalidOption, matching core.ErrUnsupported too.
//
// The limit should be the same on every worker; changing it between
// values above 1 is safe (see core.Semaphore). Changing it between 1 (or
// no WithLimit) and more is not, in a rolling deploy: the lock and the
// semaphore are different keys, so old and new workers do not see each
// other's executions until every worker runs the new setting.
func WithLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > core.MaxSemaphoreLimit {
			c.fail(fmt.Errorf("%w: limit %d (want 1 to %d)", ErrInvalidOption, n, core.MaxSemaphoreLimit))
			return
		}
		c.limit = n
	})
}

// WithLockOptions passes options to every lock the interceptor takes, after
// its own (default none). Useful ones: core.WithTTL (the lease length,
// default the Client's, 30 s unless set — a worker that dies holding a key
// blocks it at most this long), core.WithMetadata (replacing the default,
// which names the namespace, workflow ID, activity type, ID and attempt for
// Client.Inspect), and core.WithFair. core.WithAutoRenew(false) would let a
// lease expire under a long activity; do not use it here. An invalid one
// fails the activities with ErrTypeInvalidConfig.
func WithLockOptions(opts ...core.LockOption) Option {
	return optionFunc(func(c *config) { c.lockOpts = append(c.lockOpts, opts...) })
}
