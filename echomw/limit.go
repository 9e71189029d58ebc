package echomw

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

// LimitConfig configures Limit. Locks, Limit and Key are required; the
// fields shared with httpidem.LimitConfig mean the same there, with the
// same defaults.
type LimitConfig struct {
	// Skipper returns true for requests passed through unlimited. nil:
	// middleware.DefaultSkipper (none).
	Skipper middleware.Skipper

	// BeforeFunc, if set, runs before the middleware limits a request that
	// the Skipper did not skip.
	BeforeFunc middleware.BeforeFunc

	// Locks hands out the permits: one core.Client per backend, shared.
	// Required.
	Locks *core.Client

	// Limit is how many requests of one key may run at once. Required.
	Limit int

	// Key returns the key a request is limited under: a tenant, a user, a
	// route parameter (c.Param("account")). An error answers 401. Required.
	Key func(c echo.Context) (string, error)

	Name        string        // names the limit in keys and decisions; "": "limit"
	TTL         time.Duration // 0: core.DefaultTTL (30s), renewed every TTL/3 while the handler runs
	WaitTimeout time.Duration // 0: no wait — 429 with Retry-After at once
	RetryAfter  time.Duration // Retry-After of that 429; 0: one second

	// ErrorHandler answers the middleware's errors. nil: DefaultErrorHandler.
	ErrorHandler func(c echo.Context, err error) error

	// OnDecision, if set, is called with every decision (Kind
	// httpidem.KindLimit, Scope the Name).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces the decisions (httpidem.Observer). nil: none.
	Observer httpidem.Observer
}

// contextKey carries the echo.Context of a request into LimitConfig.Key.
type contextKey struct{}

// Limit returns middleware that runs at most limit requests of one key at
// once, across all nodes sharing locks' backend; a request over the limit
// gets 429 with Retry-After at once:
// e.POST("/export", h, echomw.Limit(locks, 2, tenantOf)). It panics if the
// configuration is invalid.
func Limit(locks *core.Client, limit int, key func(c echo.Context) (string, error)) echo.MiddlewareFunc {
	return LimitWithConfig(LimitConfig{Locks: locks, Limit: limit, Key: key})
}

// LimitWithConfig returns the Limit middleware of cfg. It panics, at
// start-up, if cfg is invalid (the message matches
// httpidem.ErrInvalidConfig); use cfg.ToMiddleware to get the error.
func LimitWithConfig(cfg LimitConfig) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching httpidem.ErrInvalidConfig. It never panics.
func (cfg LimitConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	onError := orDefault(cfg.ErrorHandler)
	hc := httpidem.LimitConfig{
		Locks: cfg.Locks, Limit: cfg.Limit, Name: cfg.Name, TTL: cfg.TTL, WaitTimeout: cfg.WaitTimeout,
		RetryAfter: cfg.RetryAfter, OnDecision: cfg.OnDecision, Observer: cfg.Observer,
	}
	if cfg.Key != nil {
		key := cfg.Key
		hc.Key = func(r *http.Request) (string, error) {
			return key(r.Context().Value(contextKey{}).(echo.Context))
		}
	}
	g, err := httpidem.NewLimitGuard(hc)
	if err != nil {
		return nil, err
	}
	return wrap(cfg.Skipper, cfg.BeforeFunc, func(c echo.Context, next echo.HandlerFunc) error {
		r := c.Request()
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), contextKey{}, c)))
		return drive(c, next, g.Begin(c.Request()), onError, false, nil)
	}), nil
}
