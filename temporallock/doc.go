// Package temporallock guarantees that Temporal activity executions mapped
// to the same key never run at the same time — across attempts, workflows
// and workers — as long as their workers share a latchkey lock backend, and
// that an execution which loses its lock is cancelled and told so. With
// WithLimit(n), the guarantee is at most n at the same time per key.
//
// Temporal runs an activity at least once, and sometimes twice at once: a
// retry after a heartbeat or start-to-close timeout starts while the first
// attempt, which has not heard of the timeout yet, still runs; two
// workflows charge the same account or reserve the same SKU. A worker
// interceptor closes that gap:
//
//	client, err := core.NewRedis(rdb) // one per process
//	...
//	ic, err := temporallock.NewInterceptor(client,
//		temporallock.WithKey(temporallock.KeyByArg("Charge", func(in ChargeInput) string { return in.AccountID })))
//	if err != nil { ... }
//	w := worker.New(tc, "billing", worker.Options{Interceptors: []interceptor.WorkerInterceptor{ic}})
//
// Any *core.Client serves: core.NewRedis, or the Client of a backend given
// to core.New (backends/sqllock, etcdlock, zklock, memcachelock). Only
// WithLimit needs more (core.CapPrimitives), and NewInterceptor says so.
//
// # What a keyed activity sees
//
// Before each attempt the KeyFunc maps the activity (its activity.Info and
// decoded arguments) to a key, or to none — then the activity runs as if
// the interceptor were not there. KeyByArg, KeyByWorkflowID and FirstKey
// build the common shapes. The lock key is KeyPrefix + key ("temporal:...")
// on the core.Client.
//
// A keyed attempt takes the lock first. If another execution holds it, the
// attempt waits for its release (pushed on a backend with core.CapNotify,
// such as Redis or PostgreSQL; polled on one without) for at most
// WithWaitTimeout (default one minute), half the time left before its
// deadline and half its heartbeat timeout; or, WithFailFast, not at all.
// If it does not get the lock it fails with the retryable application
// error ErrTypeBusy, without running, and Temporal's retry policy decides
// when to try again. A lock backend that cannot be reached fails it with
// ErrTypeUnavailable (also retryable): an outage is not contention.
//
// While the activity runs, the core watchdog renews the lease every third
// of its TTL (core.WithTTL through WithLockOptions; default 30 s) on its
// own timer. Renewal does not depend on heartbeats — heartbeats reach the
// server throttled, and an activity need not send any — and the
// interceptor sends none: heartbeating activities keep their heartbeats
// and details unchanged. When the activity returns — a result, an error,
// a panic — the lock is released: its own hold of it, that is; a nested
// hold the activity took (a lock call of LockKeyFromContext's key, which
// re-enters the lease) and did not release keeps the lease until it is
// released or the Client closes.
//
// If the lease is lost meanwhile (renewal found it gone or could not reach
// the backend before it expired), the activity's context is cancelled
// with a cause matching ErrLost and core.ErrLost (see context.Cause), and
// the attempt fails with the retryable ErrTypeLost error, whatever the
// activity returned — or if it panicked (the panic joins the cause as
// ErrPanic): for a while it ran without the lock. The context learns of
// the loss when the goroutine that cancels it runs, which a starved
// process may delay past the lease's end: core.FenceFromContext on the
// activity's context (its ok is false from the lease's deadline on) is the
// prompt check. Fence returns
// the lease's fencing token inside the activity; pass it with every write
// the lock protects and let the storage reject stale fences — that, not
// the lock alone, stops an attempt that stalled past its TTL.
//
// # Errors
//
// Workflows and the Temporal UI see application errors of the types
// ErrTypeBusy, ErrTypeLost, ErrTypeUnavailable (retryable),
// ErrTypeInvalidKey and ErrTypeInvalidConfig (not retryable); IsBusy and
// IsLost recognise the first two on either side. List a type in
// temporal.RetryPolicy.NonRetryableErrorTypes to stop Temporal retrying
// it. In the worker the errors also wrap this package's sentinels and the
// core error.
//
// # What it cannot do
//
// It serialises executions; it does not deduplicate them — an activity
// that completed is run again if Temporal retries it, so activities stay
// idempotent. An activity that completes asynchronously
// (activity.ErrResultPending) holds the lock only until it returns.
// Activities on workers that do not install the interceptor, or whose
// clients use another backend or key prefix, are not excluded. A worker
// that dies holding a key blocks it until the lease's TTL runs out.
package temporallock
