// Package otel makes every latchkey lock operation and cron tick visible in
// an existing OpenTelemetry setup — spans that nest under the caller's and
// metrics with a fixed, documented contract — without core importing
// OpenTelemetry, and without a raw lock key leaving the process unless
// asked for.
//
// One Instrumentation wires everything: it implements core.Observer,
// cronlock.Observer and httpidem.Observer (and the hooks of the other
// adapters as they gain one):
//
//	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))
//	client, err := core.NewRedis(rdb, core.WithObserver(inst))
//	crons, err := cronlock.New(client, cronlock.WithObserver(inst))
//	store, err := httpidem.NewRedisStore(rdb, httpidem.WithLocks(client))
//	orders := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Observer: inst})
//	votes := echomw.DailyWithConfig(echomw.DailyConfig{Store: store, Scope: "vote", Observer: inst, ...})
//
// The package is named otel, like go.opentelemetry.io/otel: alias one of
// them where both are imported (otelapi "go.opentelemetry.io/otel").
//
// It follows the OpenTelemetry contrib instrumentation rules: ScopeName is
// the import path and Version its version; WithTracerProvider and
// WithMeterProvider default to the global providers; there is no Tracer or
// Meter option; options are sealed.
//
// # Spans
//
// All spans are of kind Internal and children of the span in the caller's
// context. Operation spans are put in the context core uses for its Redis
// commands, so the command spans of go-redis's own hook
// (github.com/redis/go-redis/extra/redisotel/v9) nest under them.
//
//   - latchkey.acquire: TryLock, Lock, Do's acquisition, waiting included —
//     attempts, wait duration, fence and outcome (acquired, reentered,
//     contended, failed) — and the same for the primitives (a Semaphore
//     permit, an RWMutex hold, a Campaign, each LockAll member), told
//     apart by latchkey.lock.kind. Every lock span carries the kind.
//   - latchkey.release, latchkey.extend: fence, held duration, outcome.
//   - latchkey.renew: watchdog renewals, only with WithRenewalSpans.
//   - latchkey.lost: a lease lost before its release. It is emitted when
//     core reports the loss, as a child of the lease's latchkey.acquire
//     span (which has ended by then; a span's children may outlive it), so
//     it appears in the trace that took the lock. The span current at the
//     acquisition gets a latchkey.lease.lost event if it is still
//     recording (Do's caller is: Do waits for its callback, which the loss
//     cancels); a latchkey.cron.run span whose run lost its lease always
//     gets it. The lease itself carries the acquire span's context from
//     acquisition to loss (core hands an Observer the lease's context),
//     so no table is kept.
//   - latchkey.cron.run: one cronlock tick on this node — job, planned
//     time, node, outcome (ran, skipped, failed, lost), skip reason, fence,
//     and latchkey.cron.catch_up: true for a catch-up run of a missed tick
//     (cronlock.WithMissed), a child of the tick that found it missed. That
//     tick's span gets a latchkey.cron.missed event: how many ticks were
//     missed, how many are caught up, the first and the last.
//   - latchkey.idempotency, latchkey.daily, latchkey.paramlock,
//     latchkey.limit: what an httpidem or echomw middleware decided for one
//     request, or a grpcmw interceptor for one call, a child of the
//     request's (the call's) span. The span starts before the middleware's first
//     store call and carries its store calls (Redis command spans, the
//     lease's latchkey.acquire and latchkey.release when the store's
//     core.Client is observed), the handler when it runs under the
//     decision, and the completion after it. Attributes: the request's
//     last outcome (the httpidem.Outcome values: first, replayed,
//     in_flight, mismatch, invalid, store_error, lease_lost, not_stored;
//     first, duplicate, released; acquired, locked, lock_lost) and
//     latchkey.http.scope (the Daily scope, IdempotencyConfig.Scope, the
//     ParamLock name), never a key, principal or subject.
//
// Contention is an outcome, not an error: a TryLock that finds the key
// held, a tick claimed elsewhere, a duplicate vote, a replay, a request in
// flight elsewhere keep status Unset, as do requests the middleware
// rejects as invalid (4xx). A wait timeout or cancellation, a Redis error
// (a store error, also when failing open), a lease found gone (not_held),
// a lost lease or lock, a claim that could not be given back and a failed
// job set status Error with the message and error.type; no span records
// the error as an event (the contrib rule).
//
// # Metrics
//
// Durations are in seconds, in histograms with explicit buckets from
// 0.1 ms to 30 s. Measurements carry the lock name (WithLockName, by
// default the key's prefix before ':'), never the key, so 10 000 keys of
// one kind are one series. error.type is present only on failures and
// equals the span's.
//
//	latchkey.lock.operation.duration  histogram, s   name, kind, operation, outcome[, error.type]
//	latchkey.lock.wait.duration       histogram, s   name, kind, outcome[, error.type]
//	latchkey.lock.held.duration       histogram, s   name, kind, outcome (released, not_held, failed, lost)
//	latchkey.lock.held.count          updown, {lock} name, kind
//	latchkey.lock.waiters             updown, {waiter} name, kind
//	latchkey.lock.losses              counter, {lock} name, kind
//	latchkey.leader.changes           counter, {change} name, kind, outcome (elected, resigned, lost)
//	latchkey.cron.runs                counter, {run}  job, outcome[, skip_reason][, error.type][, catch_up]
//	latchkey.cron.run.duration        histogram, s   job, outcome[, error.type][, catch_up]
//	latchkey.cron.missed              counter, {tick} job, outcome (catch_up, skipped)
//	latchkey.idempotency.requests     counter, {request} [scope, ]outcome[, error.type]
//	latchkey.daily.claims             counter, {claim} scope, outcome[, error.type]
//
// (catch_up is latchkey.cron.catch_up, present and true only for a
// catch-up run; latchkey.cron.missed counts the missed ticks that
// cronlock's look-backs found, by what the policy does with them.)
// (scope is latchkey.http.scope; an Idempotency middleware has one only if
// its config sets Scope.) The HTTP counters count each observed request
// once, by its last outcome: a first request whose lease was lost counts as lease_lost, one
// whose 5xx answer was not stored as not_stored, and a daily claim given
// back after a failed handler as released.
//
// kind (latchkey.lock.kind) is what a lease holds, core.Kind: lock,
// permit (a Semaphore's: latchkey.lock.held.count of kind permit is the
// permits this process holds), read, write (an RWMutex's) or leader (a
// Campaign's). latchkey.lock.waiters counts the acquisitions waiting for
// a held key now (core.OpWait); latchkey.leader.changes counts this
// process's leadership terms starting (elected) and ending (resigned:
// released; lost).
//
// latchkey.lock.held.count goes up with each acquisition of a new lease
// and down with its release or its loss, whichever comes first, with the
// same attributes: it returns to zero after errors, panics in Do and
// losses.
//
// README.md in this directory lists every span, metric, attribute and
// outcome: the telemetry contract that otel/contract_test.go pins.
package otel
