package otel

import (
	"context"
	"errors"

	"github.com/latchkey/latchkey/core"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The telemetry contract: span names, attribute keys, outcome values and
// metric names. Dashboards and alerts depend on them; contract_test.go pins
// every one, so a rename fails the tests before it reaches a user.

// Span names.
const (
	spanAcquire = "latchkey.acquire"
	spanRelease = "latchkey.release"
	spanExtend  = "latchkey.extend"
	spanRenew   = "latchkey.renew"
	spanLost    = "latchkey.lost"
	spanCronRun = "latchkey.cron.run"

	// HTTP middleware decisions (httpidem, echomw): "latchkey." + the
	// Decision's Kind.
	spanIdempotency = "latchkey.idempotency"
	spanDaily       = "latchkey.daily"
	spanParamLock   = "latchkey.paramlock"
	spanLimit       = "latchkey.limit"
	// A dbguard deduction (Guard.Deduct, Guard.DeductMany).
	spanStockDeduct = "latchkey.stock.deduct"
	// A temporallock keyed activity execution: lock, activity, release.
	spanActivityLock = "latchkey.activity.lock"

	// eventLost is added to the span that was current when a lost lease
	// was acquired, if it is still recording.
	eventLost = "latchkey.lease.lost"
	// eventCronMissed is added to the span of the context a cronlock
	// look-back reports missed ticks with (the latchkey.cron.run span of
	// the tick that found them).
	eventCronMissed = "latchkey.cron.missed"
)

// Attribute keys.
const (
	keyLockName     = attribute.Key("latchkey.lock.name")
	keyLockKind     = attribute.Key("latchkey.lock.kind") // core.Kind: lock, permit, read, write, leader
	keyOperation    = attribute.Key("latchkey.operation.name")
	keyOutcome      = attribute.Key("latchkey.outcome")
	keyFence        = attribute.Key("latchkey.lock.fence")
	keyAttempts     = attribute.Key("latchkey.lock.attempts")
	keyWait         = attribute.Key("latchkey.lock.wait.duration") // seconds
	keyHeld         = attribute.Key("latchkey.lock.held.duration") // seconds
	keyKeyHash      = attribute.Key("latchkey.lock.key_hash")
	keyKeyRaw       = attribute.Key("latchkey.lock.key")
	keyCronJob      = attribute.Key("latchkey.cron.job")
	keyCronPlanned  = attribute.Key("latchkey.cron.planned") // RFC 3339, UTC
	keyCronNode     = attribute.Key("latchkey.cron.node")
	keyCronSkip     = attribute.Key("latchkey.cron.skip_reason")
	keyCronLocked   = attribute.Key("latchkey.cron.locked")
	keyCronDuration = attribute.Key("latchkey.cron.run.duration")    // seconds
	keyCronCatchUp  = attribute.Key("latchkey.cron.catch_up")        // a catch-up run of a missed tick
	keyMissedCount  = attribute.Key("latchkey.cron.missed.count")    // missed ticks a look-back found
	keyMissedRun    = attribute.Key("latchkey.cron.missed.catch_up") // how many of them it runs
	keyMissedFirst  = attribute.Key("latchkey.cron.missed.first")    // RFC 3339, UTC
	keyMissedLast   = attribute.Key("latchkey.cron.missed.last")     // RFC 3339, UTC
	keyHTTPScope    = attribute.Key("latchkey.http.scope")           // Decision.Scope, when not empty
	keyStockStrat   = attribute.Key("latchkey.stock.strategy")       // the strategy that decided
	keyStockFall    = attribute.Key("latchkey.stock.fallback")       // Auto went optimistic
	keyStockRetries = attribute.Key("latchkey.stock.retries")        // optimistic attempts lost
	keyActivityType = attribute.Key("latchkey.activity.type")        // a Temporal activity type
	keyErrorType    = semconv.ErrorTypeKey
)

// Outcomes (latchkey.outcome) of lock operations. Contention is an
// outcome, not an error: only outcomeFailed, outcomeNotHeld and outcomeLost
// come with error status and error.type.
const (
	outcomeAcquired  = "acquired"
	outcomeReentered = "reentered" // acquire or release of a re-entered hold
	outcomeContended = "contended" // TryLock found it held; a retry budget ran out
	outcomeReleased  = "released"
	outcomeExtended  = "extended"
	outcomeRenewed   = "renewed"
	outcomeNotHeld   = "not_held" // the lease had expired or been taken over
	outcomeLost      = "lost"     // the lease was lost (release of a lost lease, LeaseLost)
	outcomeFailed    = "failed"   // any other error; error.type says which

	// latchkey.leader.changes outcomes (a Campaign's leadership).
	outcomeElected  = "elected"
	outcomeResigned = "resigned"

	// latchkey.cron.missed outcomes: what the policy does with a missed
	// tick.
	outcomeCatchUp = "catch_up" // run now, as a catch-up run
	outcomeSkipped = "skipped"  // left missed (MissedSkip never looks)
)

// Metric names.
const (
	metricOpDuration    = "latchkey.lock.operation.duration"
	metricWaitDuration  = "latchkey.lock.wait.duration"
	metricHeldDuration  = "latchkey.lock.held.duration"
	metricHeldCount     = "latchkey.lock.held.count"
	metricLosses        = "latchkey.lock.losses"
	metricWaiters       = "latchkey.lock.waiters"
	metricLeaderChanges = "latchkey.leader.changes"
	metricCronRuns      = "latchkey.cron.runs"
	metricCronDuration  = "latchkey.cron.run.duration"
	metricCronMissed    = "latchkey.cron.missed"
	metricIdemRequests  = "latchkey.idempotency.requests"
	metricDailyClaims   = "latchkey.daily.claims"
	metricStockDeducts  = "latchkey.stock.deductions"
	metricStockRetries  = "latchkey.stock.optimistic.retries"
	metricActivityLock  = "latchkey.activity.locks"
)

// durationBuckets are the explicit histogram boundaries of every duration
// metric, in seconds: 0.1 ms to 30 s.
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

// Error types (error.type).
const (
	errTimeout    = "timeout"          // a wait or a call ran out of time
	errCanceled   = "canceled"         // the caller's context was cancelled
	errLost       = "lost"             // the lease was lost
	errNotHeld    = "not_held"         // release/extend/renew found the lease gone
	errClosed     = "closed"           // the core.Client was closed
	errReplicaAck = "replica_ack"      // core.ErrReplicaAck
	errInvalid    = "invalid_argument" // a bad key, TTL or option
	errBackend    = "backend"          // Redis (or another backend) failed
	errPanic      = "panic"            // a cron job panicked
	errMaxHold    = "max_hold"         // a cron job reached its max hold
	errMisconfig  = "misconfigured"    // a middleware answered 500 for its own config or route
	errLockDown   = "lock_unavailable" // dbguard.ErrUnavailable: the lock service failed
	errStale      = "stale_fence"      // dbguard.ErrStaleFence: a newer holder had written
	errDatabase   = "database"         // the SQL database failed
	errUnknown    = "outcome_unknown"  // dbguard.ErrOutcomeUnknown: the answer was lost after the write was sent
)

// errorType names err for error.type, low-cardinality: the value of an
// ErrorType() string method in its chain (as semconv.ErrorType), else the
// first sentinel of this module it matches, else fallback.
func errorType(err error, fallback string) string {
	var et interface{ ErrorType() string }
	if errors.As(err, &et) {
		if s := et.ErrorType(); s != "" {
			return s
		}
	}
	switch {
	case errors.Is(err, core.ErrLost):
		return errLost
	case errors.Is(err, core.ErrClosed):
		return errClosed
	case errors.Is(err, context.DeadlineExceeded):
		return errTimeout
	case errors.Is(err, context.Canceled):
		return errCanceled
	case errors.Is(err, core.ErrNotHeld):
		return errNotHeld
	case errors.Is(err, core.ErrReplicaAck):
		return errReplicaAck
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidTTL),
		errors.Is(err, core.ErrInvalidOption), errors.Is(err, core.ErrNilClient):
		return errInvalid
	}
	return fallback
}

// isContention reports whether an acquisition error is plain contention:
// ErrNotAcquired without a deadline or cancellation behind it (TryLock
// found the key held, or Lock's retry budget ran out).
func isContention(err error) bool {
	return errors.Is(err, core.ErrNotAcquired) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}
