// Package otel makes every latchkey lock operation and cron tick visible in
// an existing OpenTelemetry setup — spans that nest under the caller's and
// metrics with a fixed, documented contract — without core importing
// OpenTelemetry, and without a raw lock key leaving the process unless
// asked for.
//
// One Instrumentation wires everything: it implements core.Observer and
// cronlock.Observer (and the hooks of the other adapters as they gain one):
//
//	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))
//	client := core.NewRedis(rdb, core.WithObserver(inst))
//	crons := cronlock.New(client, cronlock.WithObserver(inst))
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
//     contended, failed).
//   - latchkey.release, latchkey.extend: fence, held duration, outcome.
//   - latchkey.renew: watchdog renewals, only with WithRenewalSpans.
//   - latchkey.lost: a lease lost before its release. It is emitted when
//     core reports the loss, as a child of the lease's latchkey.acquire
//     span (which has ended by then; a span's children may outlive it), so
//     it appears in the trace that took the lock. The span current at the
//     acquisition gets a latchkey.lease.lost event if it is still
//     recording (Do's caller is: Do waits for its callback, which the loss
//     cancels); a latchkey.cron.run span whose run lost its lease always
//     gets it. The acquire span's context is kept in a bounded table from
//     acquisition to release or loss (see leases.go).
//   - latchkey.cron.run: one cronlock tick on this node — job, planned
//     time, node, outcome (ran, skipped, failed, lost), skip reason, fence.
//
// Contention is an outcome, not an error: a TryLock that finds the key
// held, a tick claimed elsewhere, keep status Unset. A wait timeout or
// cancellation, a Redis error, a lease found gone (not_held), a lost lease
// and a failed job set status Error with the message and error.type; no
// span records the error as an event (the contrib rule).
//
// # Metrics
//
// Durations are in seconds, in histograms with explicit buckets from
// 0.1 ms to 30 s. Measurements carry the lock name (WithLockName, by
// default the key's prefix before ':'), never the key, so 10 000 keys of
// one kind are one series. error.type is present only on failures and
// equals the span's.
//
//	latchkey.lock.operation.duration  histogram, s   name, operation, outcome[, error.type]
//	latchkey.lock.wait.duration       histogram, s   name, outcome[, error.type]
//	latchkey.lock.held.duration       histogram, s   name, outcome (released, not_held, failed, lost)
//	latchkey.lock.held.count          updown, {lock} name
//	latchkey.lock.losses              counter, {lock} name
//	latchkey.cron.runs                counter, {run}  job, outcome[, skip_reason][, error.type]
//	latchkey.cron.run.duration        histogram, s   job, outcome[, error.type]
//
// latchkey.lock.held.count goes up with each acquisition of a new lease
// and down with its release or its loss, whichever comes first, with the
// same attributes: it returns to zero after errors, panics in Do and
// losses.
package otel
