package temporallock

import (
	"errors"

	"go.temporal.io/sdk/temporal"
)

// Temporal error types of the application errors (temporal.ApplicationError)
// that the interceptor returns instead of running, or after running, a keyed
// activity. They travel to the workflow and the Temporal UI; match them with
// IsBusy and IsLost, or by ApplicationError.Type(). Put one in
// temporal.RetryPolicy.NonRetryableErrorTypes to stop Temporal retrying that
// case.
const (
	// ErrTypeBusy: the activity did not run because another execution held
	// its key — at once with WithFailFast, or when the bounded wait ended.
	// Retryable, category benign (contention is expected, not an alert);
	// the cause matches ErrBusy and core.ErrNotAcquired.
	ErrTypeBusy = "latchkey.LockBusy"

	// ErrTypeLost: the activity ran, but its lease ended before it returned
	// (renewal found the key gone or taken, or could not reach the backend
	// in time). Its context was cancelled then. Retryable; the cause matches
	// ErrLost and core.ErrLost, joined with the activity's own error — or,
	// if it panicked after the loss, with an ErrPanic error: loss wins.
	ErrTypeLost = "latchkey.LockLost"

	// ErrTypeUnavailable: the lock backend failed (Redis unreachable, the
	// core.Client closed) so the activity did not run. Retryable — another
	// attempt, perhaps on another worker, may reach it. The cause matches
	// ErrUnavailable and the backend's error.
	ErrTypeUnavailable = "latchkey.LockUnavailable"

	// ErrTypeInvalidKey: the key function returned ok with a key that cannot
	// be locked (see ErrInvalidKey). Not retryable: the same input gives the
	// same key. A keyed activity never runs unlocked by mistake.
	ErrTypeInvalidKey = "latchkey.InvalidKey"

	// ErrTypeInvalidConfig: a lock option passed through WithLockOptions
	// is invalid (core checks lock options when a lock is taken). Not
	// retryable; every keyed activity fails with it rather than run
	// without the lock it was meant to have.
	ErrTypeInvalidConfig = "latchkey.InvalidConfig"
)

// Errors of this package. Match them with errors.Is in the process that
// ran the activity (the worker, a test environment): the application error
// the interceptor returns carries them as its cause, together with the
// core error and its cause. Across the Temporal server only the error
// type survives; match that with IsBusy and IsLost.
var (
	// ErrBusy: the key was held by another execution (ErrTypeBusy).
	ErrBusy = errors.New("temporallock: lock busy")

	// ErrLost: the lease ended while the activity ran (ErrTypeLost). It is
	// also the cause (context.Cause) of the activity's cancelled context.
	ErrLost = errors.New("temporallock: lock lost")

	// ErrPanic: the activity panicked after its lease was lost. Loss wins:
	// the attempt fails with ErrTypeLost, whose cause joins ErrLost with an
	// error that wraps ErrPanic and the panic value (and matches the value
	// with errors.Is when it is an error); the stack goes to the activity
	// logger. A panic while the lease holds is left to the SDK, which
	// reports it as a temporal.PanicError.
	ErrPanic = errors.New("temporallock: activity panicked")

	// ErrUnavailable: the lock backend failed (ErrTypeUnavailable).
	ErrUnavailable = errors.New("temporallock: lock backend unavailable")

	// ErrInvalidKey: a key that is empty, longer than MaxKeyLen bytes, not
	// valid UTF-8 or contains a control character (ErrTypeInvalidKey).
	ErrInvalidKey = errors.New("temporallock: invalid key")

	// ErrNilClient: NewInterceptor was given a nil *core.Client.
	ErrNilClient = errors.New("temporallock: nil core client")

	// ErrNoKey: NewInterceptor was given no WithKey (or a nil KeyFunc).
	ErrNoKey = errors.New("temporallock: no key function")

	// ErrInvalidOption: an option value that cannot work (a negative wait
	// timeout, a nil option), or a core option rejected at lock time.
	ErrInvalidOption = errors.New("temporallock: invalid option")
)

// IsBusy reports whether err is, or wraps, an application error of type
// ErrTypeBusy — in the worker, or in a workflow that got it back from the
// activity (a temporal.ActivityError wrapping it).
func IsBusy(err error) bool { return hasType(err, ErrTypeBusy) }

// IsLost reports whether err is, or wraps, an application error of type
// ErrTypeLost — in the worker, or in a workflow that got it back from the
// activity.
func IsLost(err error) bool { return hasType(err, ErrTypeLost) }

// hasType reports whether an ApplicationError in err's chain has type typ.
func hasType(err error, typ string) bool {
	for err != nil {
		var app *temporal.ApplicationError
		if !errors.As(err, &app) {
			return false
		}
		if app.Type() == typ {
			return true
		}
		err = app.Unwrap()
	}
	return false
}

// appError makes the application error of one of the types above.
func appError(typ, msg string, cause error) error {
	opts := temporal.ApplicationErrorOptions{Cause: cause}
	switch typ {
	case ErrTypeBusy:
		opts.Category = temporal.ApplicationErrorCategoryBenign
	case ErrTypeInvalidKey, ErrTypeInvalidConfig:
		opts.NonRetryable = true
	}
	return temporal.NewApplicationErrorWithOptions(msg, typ, opts)
}
