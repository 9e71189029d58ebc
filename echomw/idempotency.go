package echomw

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/latchkey/latchkey/httpidem"
)

// IdempotencyConfig configures the Idempotency middleware. Only Store is
// required; the other fields mean what the httpidem.IdempotencyConfig
// fields of the same names mean, with the same defaults.
type IdempotencyConfig struct {
	// Skipper returns true for requests passed through untouched. nil:
	// middleware.DefaultSkipper (none). Methods other than Methods
	// (default POST and PATCH) pass through as well.
	Skipper middleware.Skipper

	// BeforeFunc, if set, runs before the middleware decides a request
	// that the Skipper did not skip.
	BeforeFunc middleware.BeforeFunc

	// Store keeps leases and records. Required. Share it with httpidem
	// middleware to share keys.
	Store httpidem.IdempotencyStore

	// Principal returns who is calling (user, tenant, API key); keys are
	// scoped by it. An error or "" answers 401. nil:
	// httpidem.AuthorizationPrincipal, a hash of the Authorization header,
	// so a request without that header gets 401 — set Principal when your
	// callers are identified otherwise.
	Principal middleware.Extractor

	Require         bool                                      // 400 without a key; false: pass through
	Methods         []string                                  // nil: POST, PATCH
	MaxKeyLength    int                                       // 0: 255
	LeaseTTL        time.Duration                             // 0: 30s, renewed while the handler runs
	RecordTTL       time.Duration                             // 0: 24h
	WaitInFlight    time.Duration                             // 0: 409 at once
	RetryAfter      time.Duration                             // Retry-After of that 409; 0: 1s
	MaxRequestBody  int64                                     // 0: 1 MiB; larger is 413
	MaxResponseBody int64                                     // 0: 1 MiB; larger is sent, not stored
	StoreHeaders    []string                                  // nil: httpidem.DefaultStoreHeaders
	StoreStatus     func(status int) bool                     // nil: all but 5xx and 429
	Fingerprint     func(r *http.Request, body []byte) string // nil: httpidem.DefaultFingerprint
	FailOpen        bool                                      // store down: run unprotected; false: 503

	// ErrorHandler answers the middleware's errors (err carries an
	// *httpidem.Problem) and returns what the middleware returns. nil:
	// DefaultErrorHandler.
	ErrorHandler func(c echo.Context, err error) error

	// OnDecision, if set, is called with every decision (httpidem.Decision).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces and measures the decisions
	// (httpidem.Observer; package otel's Instrumentation is one). nil: none.
	Observer httpidem.Observer

	// Scope names what the middleware protects ("orders") in decisions and
	// telemetry, as httpidem.IdempotencyConfig.Scope. "": none.
	Scope string
}

// DefaultIdempotencyConfig holds the Echo-specific defaults; the others
// are httpidem.DefaultIdempotencyConfig's.
var DefaultIdempotencyConfig = IdempotencyConfig{
	Skipper:      middleware.DefaultSkipper,
	ErrorHandler: DefaultErrorHandler,
}

// Idempotency returns the middleware with DefaultIdempotencyConfig and
// store: e.POST("/orders", h, echomw.Idempotency(store)). It panics if
// store is nil.
func Idempotency(store httpidem.IdempotencyStore) echo.MiddlewareFunc {
	cfg := DefaultIdempotencyConfig
	cfg.Store = store
	return IdempotencyWithConfig(cfg)
}

// IdempotencyWithConfig returns the middleware for cfg. Like Echo's own
// constructors it panics, at start-up, if cfg is invalid (the message
// matches httpidem.ErrInvalidConfig); use cfg.ToMiddleware to get the
// error instead.
func IdempotencyWithConfig(cfg IdempotencyConfig) echo.MiddlewareFunc {
	return must(cfg.ToMiddleware())
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching httpidem.ErrInvalidConfig. It never panics.
func (cfg IdempotencyConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	onError := orDefault(cfg.ErrorHandler)
	g, err := httpidem.NewIdempotencyGuard(httpidem.IdempotencyConfig{
		Store: cfg.Store, Require: cfg.Require, Methods: cfg.Methods, MaxKeyLength: cfg.MaxKeyLength,
		LeaseTTL: cfg.LeaseTTL, RecordTTL: cfg.RecordTTL, WaitInFlight: cfg.WaitInFlight, RetryAfter: cfg.RetryAfter,
		MaxRequestBody: cfg.MaxRequestBody, MaxResponseBody: cfg.MaxResponseBody,
		StoreHeaders: cfg.StoreHeaders, StoreStatus: cfg.StoreStatus, Fingerprint: cfg.Fingerprint,
		FailOpen: cfg.FailOpen, OnDecision: cfg.OnDecision, Observer: cfg.Observer, Scope: cfg.Scope,
	})
	if err != nil {
		return nil, err
	}
	return wrap(cfg.Skipper, cfg.BeforeFunc, func(c echo.Context, next echo.HandlerFunc) error {
		call := g.Begin(c.Request(), extractor(c, cfg.Principal))
		return drive(c, next, call, onError, true, nil)
	}), nil
}

// must returns mw, or panics with err: the form of a middleware
// constructor.
func must(mw echo.MiddlewareFunc, err error) echo.MiddlewareFunc {
	if err != nil {
		panic(err)
	}
	return mw
}
