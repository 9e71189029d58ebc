// Package httpidem guarantees that a retried or double-submitted HTTP
// request does its work once: while a response is stored, its
// Idempotency-Key never runs the handler again for the same principal
// (later copies get the stored response, a concurrent copy gets 409, a
// different request under the same key gets 422), and a once-per-day gate
// lets a subject through at most once per object per local calendar day.
//
// The limits are those of a lease: a response the policy does not store
// (5xx, 429, streamed, too large, or one the client did not receive whole
// — it hung up, so a write failed) lets the retry run again, by design; and
// a lease lost while its handler runs (a Redis failover that dropped it) is
// reported — the request context is cancelled and the response is not
// stored — but cannot undo work already done. A handler that returns
// without writing answers 200, which is stored even when its client has
// gone (it may have done its work): one that gives up on a cancelled
// context should answer an error (a 5xx is not stored). In a handler
// transaction (WithHandlerTx) such an empty answer after the client went
// away rolls the writes back instead, and nothing is stored.
//
// # Idempotency-Key
//
// Idempotency implements draft-ietf-httpapi-idempotency-key-header-07,
// following Stripe where the draft is silent:
//
//   - The key is an RFC 8941 sf-string ("8e03978e-...") or a bare token
//     (8e03978e-...), 1 to 255 bytes; an empty key, a longer one, control
//     characters, a list or a repeated header line is 400. A missing key is
//     400 when Require is set and passes through otherwise.
//   - Keys are scoped by a principal (user, tenant, API key) taken from the
//     request: one principal's key never replays for another. A request
//     whose principal cannot be determined gets 401. The default Principal,
//     AuthorizationPrincipal, is a hash of the Authorization header, so a
//     request without one gets 401 (whose detail names the setting): set
//     IdempotencyConfig.Principal to the account or tenant ID your
//     authentication established.
//   - The first request takes an in-flight lease — a core lock, renewed while
//     the handler runs; a lost lease cancels the request context — and, on
//     completion, stores the status, allow-listed headers and body.
//   - A later request with the same key and fingerprint (method, path,
//     query, SHA-256 of the body) gets that response byte for byte, with
//     Idempotent-Replayed: true. A different fingerprint is 422, also while
//     the first one is still in flight (422 wins over 409). A copy that
//     arrives while the first is running gets 409 with Retry-After, or waits
//     for it (WaitInFlight) and gets the replay.
//   - Set-Cookie, Authorization and hop-by-hop headers are never stored.
//     5xx and 429 responses are not stored by default, so the retry runs
//     again. A panicking handler gives up the lease and re-panics.
//   - Every error is application/problem+json with a stable "code" and
//     Cache-Control: no-store.
//
// # Once per day
//
// Daily gates a subject (who) and an object (what) once per local day of a
// configured time.Location: the first request passes, later ones get 409
// with Retry-After set to the next local midnight (or a DuplicateHandler's
// answer), and a failed handler (5xx or panic) gives the claim back. In
// Count mode it never blocks and counts each subject once per object per
// day, exactly or with a HyperLogLog. Gate offers the same without HTTP.
//
// A day is a civil date in the location; its end is the next local
// midnight computed with time.Date — never by adding 24 hours, never in
// time.Local — moved forward to the first instant of the day where
// midnight does not exist (DST changes at midnight, as in
// America/Santiago). A claim is one atomic set-if-absent whose key holds the
// date, kept a grace period past the day's end so clock skew never frees it
// early. It carries a random token of its own: on Redis, a claim that
// go-redis sends again after its answer was lost finds its own token and
// is still the first.
//
// # Guards and adapters
//
// Each middleware is a thin layer over a framework-neutral guard:
// IdempotencyGuard, DailyGuard, ParamLockGuard (a lock named by route
// parameters, used by package echomw's ParamLock) and LimitGuard (at most N
// requests of a key in flight, on a core.Semaphore; Limit and echomw's
// Limit). A guard's Begin returns
// a Call whose Action says what to do — pass, answer its Problem, replay,
// answer a duplicate, or run the handler and Finish — so an adapter for
// another framework (echomw, gRPC, gin) only translates, and a fix lands
// once.
//
// # Configuration mistakes
//
// A config mistake is never a 500 per request. As in Echo, a middleware
// constructor (Idempotency, Daily, Limit) panics at start-up with a message that
// matches ErrInvalidConfig and says what is wrong; the config's
// ToMiddleware method returns the same error without panicking, for
// programs that validate. A constructor that can fail otherwise returns
// (T, error): NewRedisStore, NewMemoryStore, NewIdempotencyGuard,
// NewSQLStore, NewDailyGuard, NewParamLockGuard, NewLimitGuard, NewGate.
//
// # Errors
//
// Errors are sentinels matched with errors.Is, in core's vocabulary:
// contention (ErrInFlight, ErrAlreadyClaimed, ErrLocked) also matches
// core.ErrNotAcquired; a lease or lock lost while its handler ran (ErrLost)
// also matches core.ErrLost; an outage is ErrUnavailable wrapping the
// store's error; bad input is ErrInvalid<What>.
//
// # Stores
//
// The two protocols have two small store interfaces: IdempotencyStore
// (Begin) and ClaimStore (Claim, Unclaim), with ClaimCounter as the
// optional extension for counting. NewRedisStore keeps everything on Redis
// (a server, Sentinel or Cluster: keys of one script share a hash tag);
// NewMemoryStore keeps it in the process, for tests and single-process
// programs; both take their in-flight leases from a core.Client.
// NewSQLStore keeps everything, leases included, in two tables of a SQL
// database — PostgreSQL, MySQL/MariaDB or SQLite, through database/sql —
// so that a service with a database and no Redis has every feature. All
// three implement all three interfaces. Package storetest is the
// conformance suite a third-party store runs to prove itself.
//
// # Transactions
//
// A SQLStore made WithHandlerTx runs every request that owns its
// Idempotency-Key in a database transaction: the handler gets it from
// TxFromContext, makes its writes (the order, the payment) in it, and the
// middleware inserts the response row in the same transaction and
// commits it. The writes and the stored response are committed together
// or not at all, so a crash between "order inserted" and "response
// stored" cannot make a retry insert the order twice.
//
// The key's lease — what tells a concurrent duplicate "in flight" — is a
// row of its own, inserted and committed before the handler runs, and
// renewed beside the transaction. The response row's primary key is the
// key itself, so even two requests that both believe they hold the key
// (one paused past its lease, another took the key over) cannot both
// commit: the second insert of the row fails, and its transaction rolls
// back, writes included. What a crash does, at each point:
//
//   - Before the lease row is committed: nothing happened; a retry runs.
//   - After it, before the commit — the handler running, its writes made,
//     the response row inserted but not committed: the database rolls
//     the transaction back when the connection dies. The lease row stays
//     until its LeaseTTL runs out (it is no longer renewed), so
//     duplicates get 409 until then; then a retry runs the handler, once.
//   - During the COMMIT: either both the writes and the response row are
//     committed or neither is, as the database decides. If the middleware
//     learns the outcome it acts on it; if the connection broke, it looks
//     for the response row under its lease's token, and if it cannot find
//     it answers 503 and leaves the lease row to expire, so that no retry
//     runs before the commit's fate is settled: a retry then replays or
//     runs.
//   - After the COMMIT, before the response reaches the client: the
//     response is stored; a retry gets it replayed. (The lease row,
//     deleted just after the commit, expires instead.)
//
// The response is held until the commit: the client hears only of
// committed writes. A response that StoreStatus does not store (5xx, 429
// by default) and a panic roll the transaction back and give the key up
// at once, so the retry runs for real; a response that cannot be stored
// (over MaxResponseBody, a hijack) is rolled back and answered 500
// (ErrNotStorable); a lease lost while the handler runs cancels the
// request context and rolls the transaction back at once (503,
// CodeLockLost). The handler must not commit or roll back the
// transaction itself, nor write through another connection what must
// commit with the response; and what the handler does outside the
// database (a call to a payment provider) is not rolled back — pass the
// provider an idempotency key of its own. On SQLite a transaction holds the database's
// one write lock, so leases are not renewed while a handler's transaction
// is open: there, LeaseTTL must exceed the longest handler.
//
// # Observing
//
// OnDecision in each config is called with every decision the middleware
// takes (first, replayed, in_flight, mismatch, ...), for logging and
// counting. Observer in each config is the tracing hook: it is called
// before the middleware's first store call, its context carries the store
// calls, the handler and the completion, and it hears the request's last
// decision once. Package otel's Instrumentation implements it (spans
// latchkey.idempotency and latchkey.daily, counters
// latchkey.idempotency.requests and latchkey.daily.claims). No hook is
// given a key, principal or subject.
package httpidem
