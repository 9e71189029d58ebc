package temporallock

import "context"

// An Observer sees the lock of every keyed activity execution — package
// otel implements it. Its signature uses only standard types, so an
// implementation need not import the Temporal SDK. Install one with
// WithObserver.
type Observer interface {
	// ActivityLockStart is called when a keyed activity execution starts to
	// take its lock; the context it returns is used to take the lock and
	// to run the activity (so a span started here is the parent of the
	// lock's spans and of the activity's own). end is called once, when
	// the execution is over, with its outcome — one of the Outcome
	// constants — the lease's fence (0 if none) and the error the
	// execution returned (nil on success).
	ActivityLockStart(ctx context.Context, activityType string) (context.Context, func(outcome string, fence int64, err error))
}

// Outcomes reported to an Observer.
const (
	OutcomeRan         = "ran"         // the activity ran under the lock (its own error, if any, is the activity's)
	OutcomeBusy        = "busy"        // the key was held: the activity did not run (ErrTypeBusy)
	OutcomeLost        = "lost"        // the lease ended before the activity returned (ErrTypeLost)
	OutcomeUnavailable = "unavailable" // the lock service failed: the activity did not run (ErrTypeUnavailable)
	OutcomeCanceled    = "canceled"    // the activity was cancelled or timed out while it waited
	OutcomeInvalid     = "invalid"     // an unusable key or lock option: the activity did not run
)

// WithObserver installs an Observer (default none; nil means none).
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) { c.observer = o })
}

// outcomeOf names how an execution ended, from the error it returned and
// whether the activity ran.
func outcomeOf(ran bool, err error) string {
	switch {
	case IsLost(err):
		return OutcomeLost
	case ran:
		return OutcomeRan
	case IsBusy(err):
		return OutcomeBusy
	case hasType(err, ErrTypeUnavailable):
		return OutcomeUnavailable
	case hasType(err, ErrTypeInvalidKey), hasType(err, ErrTypeInvalidConfig):
		return OutcomeInvalid
	default:
		return OutcomeCanceled
	}
}
