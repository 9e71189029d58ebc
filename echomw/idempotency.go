package echomw

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/httpidem"
)

// IdempotencyConfig configures the Idempotency middleware. Only Store is
// required; the other fields mean what the httpidem.IdempotencyConfig
// fields of the same names mean, with the same defaults.
type IdempotencyConfig struct {
	// Skipper returns true for requests passed through untouched (an Echo
	// middleware.Skipper fits). nil: none. Methods other than Methods
	// (default POST and PATCH) pass through as well.
	Skipper func(c echo.Context) bool

	// Store keeps leases and records. Required. Share it with httpidem
	// middleware to share keys.
	Store httpidem.Store

	// IdentifierExtractor returns the principal (user, tenant, API key)
	// that scopes keys (an Echo middleware.Extractor fits); an error or ""
	// answers 401. nil: httpidem.AuthorizationPrincipal.
	IdentifierExtractor func(c echo.Context) (string, error)

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
	Skipper:      neverSkip,
	ErrorHandler: DefaultErrorHandler,
}

// Idempotency returns the middleware with DefaultIdempotencyConfig and
// store: e.POST("/orders", h, echomw.Idempotency(store)).
func Idempotency(store httpidem.Store) echo.MiddlewareFunc {
	cfg := DefaultIdempotencyConfig
	cfg.Store = store
	return IdempotencyWithConfig(cfg)
}

// IdempotencyWithConfig returns the middleware for cfg. It never panics:
// if cfg is invalid every request fails with a 500 problem — call
// cfg.ToMiddleware at start-up to get the error instead.
func IdempotencyWithConfig(cfg IdempotencyConfig) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		return misconfigured(err, cfg.ErrorHandler)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching httpidem.ErrInvalidConfig.
func (cfg IdempotencyConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	if cfg.Skipper == nil {
		cfg.Skipper = DefaultIdempotencyConfig.Skipper
	}
	if cfg.ErrorHandler == nil {
		cfg.ErrorHandler = DefaultErrorHandler
	}
	g, err := httpidem.NewGuard(httpidem.IdempotencyConfig{
		Store: cfg.Store, Require: cfg.Require, Methods: cfg.Methods, MaxKeyLength: cfg.MaxKeyLength,
		LeaseTTL: cfg.LeaseTTL, RecordTTL: cfg.RecordTTL, WaitInFlight: cfg.WaitInFlight, RetryAfter: cfg.RetryAfter,
		MaxRequestBody: cfg.MaxRequestBody, MaxResponseBody: cfg.MaxResponseBody,
		StoreHeaders: cfg.StoreHeaders, StoreStatus: cfg.StoreStatus, Fingerprint: cfg.Fingerprint,
		FailOpen: cfg.FailOpen, OnDecision: cfg.OnDecision, Observer: cfg.Observer, Scope: cfg.Scope,
	})
	if err != nil {
		return nil, err
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper(c) || !g.Applies(c.Request()) {
				return next(c)
			}
			var principal func(*http.Request) (string, error)
			if cfg.IdentifierExtractor != nil {
				principal = func(*http.Request) (string, error) { return cfg.IdentifierExtractor(c) }
			}
			call, p := g.Begin(c.Request(), principal)
			switch {
			case p != nil:
				return cfg.ErrorHandler(c, p)
			case call == nil:
				return next(c)
			case call.Replay(c.Response()):
				return nil
			}
			return run(c, next, call)
		}
	}, nil
}

// run serves a request that owns its key: the response is recorded as it
// goes out through c.Response(), an error the handler returns is rendered
// (c.Error) before the record is taken — so the replay repeats it — and
// then returned, so outer middleware sees it; Echo's error handler finds
// the response committed and writes nothing twice.
func run(c echo.Context, next echo.HandlerFunc, call *httpidem.Call) error {
	req, res := c.Request(), c.Response()
	orig := res.Writer
	res.Writer = call.Capture(orig)
	c.SetRequest(call.Request())
	defer func() {
		res.Writer = orig
		c.SetRequest(req)
		call.Abort() // after Finish a no-op; on a panic it gives the key up
	}()
	err := next(c)
	if err != nil && !res.Committed {
		c.Error(err)
	}
	call.Finish()
	return err
}
