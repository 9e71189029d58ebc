package echomw

import "errors"

// Errors of ParamLock and of the configs. The Idempotency and Daily
// middlewares answer with httpidem's errors (httpidem.ErrInFlight,
// httpidem.ErrAlreadyClaimed, ...); errors.Is finds them in what the
// middlewares return.
var (
	// ErrLocked: ParamLock found the parameters' lock held (and did not
	// get it within WaitTimeout). Answered 409 with Retry-After.
	ErrLocked = errors.New("echomw: resource locked")

	// ErrInvalidParam: a locked route parameter is empty, too long, not
	// validly percent-encoded, or has braces or control characters once
	// decoded. Answered 400.
	ErrInvalidParam = errors.New("echomw: invalid route parameter")

	// ErrLockLost: ParamLock's lease was lost while the handler ran; the
	// request context was cancelled with core.ErrLost as the cause.
	ErrLockLost = errors.New("echomw: lock lost")

	// ErrInvalidConfig: a config that cannot work, or a route that lacks
	// a parameter ParamLock needs. Answered 500.
	ErrInvalidConfig = errors.New("echomw: invalid config")
)

// Problem codes of ParamLock, beside httpidem's.
const (
	CodeLocked   = "resource_locked" // 409, ErrLocked
	CodeLockLost = "lock_lost"       // 503, ErrLockLost
)
