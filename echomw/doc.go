// Package echomw guarantees for Echo v4 what package httpidem guarantees for
// net/http — a retried Idempotency-Key request gets the stored response
// instead of running its handler again, a subject passes a daily gate once
// per local day — and adds ParamLock: the requests that name the same route
// parameters (one SKU, one order) run strictly one at a time across every
// node, and a request whose lock is lost has its context cancelled.
//
// The middlewares are thin adapters over httpidem: the same Store, key
// scoping, fingerprint and record format, so a key used through net/http
// replays through Echo and back. They follow Echo's conventions — a Config
// whose first field is Skipper, DefaultXxxConfig, Xxx(required) and
// XxxWithConfig(config) — with two differences that Echo v5 also makes:
// ToMiddleware returns configuration errors instead of panicking (and
// XxxWithConfig never panics: an invalid config makes every request fail
// with a 500 error), and handlers' errors are returned, never swallowed
// with c.Error(err); return nil.
//
// Error answers are application/problem+json with a stable "code"
// (httpidem's codes, plus CodeLocked and CodeLockLost), written by the
// config's ErrorHandler. The default, DefaultErrorHandler, writes the
// problem and returns an *echo.HTTPError wrapping it, so loggers and tracing
// middleware see the error and the status that went out, and Echo's
// default HTTPErrorHandler, finding the response committed, writes nothing
// more.
//
// Every config has OnDecision and Observer (an httpidem.Observer, such as
// package otel's Instrumentation), with httpidem's meaning: ParamLock's
// observation covers the acquisition, the handler and the release, so the
// spans of an observed Locker nest under it.
package echomw
