package httpidem

import "errors"

// An Outcome names what a middleware decided for a request. The values are
// stable and low-cardinality: use them as metric attributes.
type Outcome string

// The outcomes reported to OnDecision and to an Observer.
const (
	// Idempotency.
	OutcomeFirst    Outcome = "first"     // the request runs under a fresh lease (also Daily: first claim today)
	OutcomeReplayed Outcome = "replayed"  // the stored response was sent
	OutcomeInFlight Outcome = "in_flight" // 409: the first request is still running
	OutcomeMismatch Outcome = "mismatch"  // 422: same key, different request
	OutcomeInvalid  Outcome = "invalid"   // 400/413: see Err (ErrKeyMissing, ErrInvalidKey, ErrBodyTooLarge, ErrInvalidRequest, ErrInvalidParam)
	// OutcomeUnauthenticated: 401, the Principal or Subject function could
	// not identify the caller (ErrUnauthenticated); also Daily.
	OutcomeUnauthenticated Outcome = "unauthenticated"
	OutcomeStoreError      Outcome = "store_error" // the store failed; Status is 503, or 0 when failing open
	OutcomeLost            Outcome = "lease_lost"  // reported after a first request whose lease was lost (not stored)
	OutcomeNotStored       Outcome = "not_stored"  // reported after a first request whose response was not stored (policy, size, streaming)

	// Daily.
	OutcomeDuplicate Outcome = "duplicate" // the subject already claimed today (Gate: 409 or DuplicateHandler; Count: not counted)
	OutcomeReleased  Outcome = "released"  // the handler failed; the claim was given back

	// ParamLock and Limit.
	OutcomeAcquired Outcome = "acquired"  // the lock (a permit) was taken; the handler runs (and reported after it, released)
	OutcomeLocked   Outcome = "locked"    // 409: held by another request
	OutcomeLimited  Outcome = "limited"   // 429: the key's limit of requests in flight is reached
	OutcomeLockLost Outcome = "lock_lost" // the lock (permit) was lost while the handler ran
)

// A Decision is reported to a config's OnDecision callback once for every
// decision a middleware takes, on the request's goroutine. A request gets
// one decision when it is answered or passed on, and first requests get a
// second one when their lease is lost, their response is not stored, or
// the store fails on completion.
//
// It is the seam for logging and counting: Kind, Outcome and Scope are
// low-cardinality; no keys or subjects are included. Tracing needs to
// start before the store is called: see Observer.
type Decision struct {
	Kind    string  // KindIdempotency, KindDaily, KindParamLock or KindLimit
	Outcome Outcome // what was decided
	Scope   string  // the Daily scope, the ParamLock or Limit name, or IdempotencyConfig.Scope ("" unless set)
	Status  int     // the status the middleware answered itself, 0 when the handler answered
	Err     error   // why, for invalid, store_error, lease_lost and lock_lost; nil otherwise
}

// Decision kinds.
const (
	KindIdempotency = "idempotency" // IdempotencyGuard
	KindDaily       = "daily"       // DailyGuard
	KindParamLock   = "paramlock"   // ParamLockGuard
	KindLimit       = "limit"       // LimitGuard
)

// rejected is the outcome of a request answered with p before it ran:
// unauthenticated or invalid.
func rejected(p *Problem) Outcome {
	if errors.Is(p.Err, ErrUnauthenticated) {
		return OutcomeUnauthenticated
	}
	return OutcomeInvalid
}
