package temporallock

import "context"

// heldKey is the context key of the lock an activity runs under.
type heldKey struct{}

// held is what an activity's context carries about its lock.
type held struct {
	key   string
	fence int64
}

// FenceFromContext returns the fencing token of the lock that the activity whose
// context this is runs under, and ok true; ok is false (and fence 0) when
// the activity is not keyed or ctx is not an activity context of the
// interceptor. Fences of one key strictly increase with every acquisition,
// across workers and attempts: send the fence with each write the lock
// protects and have the storage reject one lower than the last it accepted
// (see dbguard), so that an attempt which lost its lease without noticing
// cannot overwrite its successor's work.
func FenceFromContext(ctx context.Context) (fence int64, ok bool) {
	h, ok := ctx.Value(heldKey{}).(held)
	return h.fence, ok
}

// LockKeyFromContext returns the core lock key that the activity whose context this is
// runs under — KeyPrefix followed by the key its KeyFunc returned — and ok
// true; ok is false when the activity is not keyed. Nested core.Client
// lock calls of this key on the interceptor's Client, with this context,
// re-enter the activity's lease instead of waiting for it.
func LockKeyFromContext(ctx context.Context) (key string, ok bool) {
	h, ok := ctx.Value(heldKey{}).(held)
	return h.key, ok
}
