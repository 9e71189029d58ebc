// Package echomw guarantees for Echo v4 what package httpidem guarantees for
// net/http — a retried Idempotency-Key request gets the stored response
// instead of running its handler again, a subject passes a daily gate once
// per local day — and adds ParamLock: the requests that name the same route
// parameters (one SKU, one order) run strictly one at a time across every
// node, and a request whose lock is lost has its context cancelled.
//
// The middlewares are thin layers over httpidem's guards
// (httpidem.IdempotencyGuard, DailyGuard, ParamLockGuard): every decision,
// store call, answer and report is theirs, so a key used through net/http
// replays through Echo and back, and a fix lands in both. The errors are
// httpidem's sentinels (httpidem.ErrInFlight, ErrAlreadyClaimed, ErrLocked,
// ErrLost, ErrUnavailable, ...); errors.Is finds them, and core's
// ErrNotAcquired or ErrLost, in what the middlewares return.
//
// They follow Echo's conventions: a Config whose first field is Skipper
// (middleware.Skipper), then BeforeFunc; extractors of type
// middleware.Extractor; DefaultXxxConfig, Xxx(required) and
// XxxWithConfig(config), which panic at start-up on an invalid config as
// Echo's do; and ToMiddleware, which returns the error instead. Handlers'
// errors are returned, never swallowed with c.Error(err); return nil.
//
// The names are httpidem's: Principal (Idempotency; default: a hash of the
// Authorization header, so a request without one gets 401 — set Principal
// when your callers are identified otherwise), Subject and Object (Daily),
// DuplicateHandler.
//
// Error answers are application/problem+json with a stable "code"
// (httpidem's Code* constants), written by the config's ErrorHandler. The
// default, DefaultErrorHandler, writes the problem and returns an
// *echo.HTTPError wrapping it, so loggers and tracing middleware see the
// error and the status that went out, and Echo's default HTTPErrorHandler,
// finding the response committed, writes nothing more.
//
// Every config has OnDecision and Observer (an httpidem.Observer, such as
// package otel's Instrumentation), with httpidem's meaning: ParamLock's
// observation covers the acquisition, the handler and the release, so the
// spans of an observed Locks client nest under it.
package echomw
