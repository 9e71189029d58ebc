package echomw

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

// ParamLockConfig configures ParamLock. Locks and Params are required; the
// fields shared with httpidem.ParamLockConfig mean the same there, with the
// same defaults.
type ParamLockConfig struct {
	// Skipper returns true for requests passed through unlocked. nil:
	// middleware.DefaultSkipper (none).
	Skipper middleware.Skipper

	// BeforeFunc, if set, runs before the middleware locks a request that
	// the Skipper did not skip.
	BeforeFunc middleware.BeforeFunc

	// Locks takes the locks: one core.Client per backend, shared. Required.
	Locks *core.Client

	// Params are the route parameters whose values name the lock, in
	// order: {"sku"} on /sku/:sku/deduct. Required. A route that lacks one
	// of them is a programming error: its requests panic with a message
	// naming the route and the parameter (Echo's Recover logs it).
	Params []string

	// Name is the lock's name, to which the parameter values are added. ""
	// : the route template, c.Path() ("/sku/:sku/deduct") — never the raw
	// URL. Give two routes the same Name to make them exclude each other.
	//
	// The lock key is "<Name>|<param>=<value>|..." (see
	// httpidem.ParamLockGuard.LockKey): two tuples of values never share a
	// lock, and a lock name cut at the key's first ':' (package otel's
	// default) comes from Name or the route template only, never from a
	// client's value — "_OTHER" when Name has no ':'; cut at the first '|'
	// instead to name locks by their whole Name (see otel.WithLockName).
	Name string

	TTL            time.Duration // 0: core.DefaultTTL (30s), renewed every TTL/3 while the handler runs
	WaitTimeout    time.Duration // 0: no wait — 409 with Retry-After at once
	RetryAfter     time.Duration // Retry-After of that 409; 0: one second
	MaxValueLength int           // each value, decoded, in bytes; 0: httpidem.DefaultMaxValueLength (128)

	// ErrorHandler answers the middleware's errors. nil: DefaultErrorHandler.
	ErrorHandler func(c echo.Context, err error) error

	// OnDecision, if set, is called with every decision (Kind
	// httpidem.KindParamLock, Scope the lock name without values).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces the decisions (httpidem.Observer; package
	// otel's Instrumentation is one): its span covers the acquisition, the
	// handler and the release, so the Locks' own spans (when the
	// core.Client is observed too) nest under it. nil: none.
	Observer httpidem.Observer
}

// DefaultParamLockConfig holds the defaults of ParamLockConfig.
var DefaultParamLockConfig = ParamLockConfig{
	Skipper:        middleware.DefaultSkipper,
	TTL:            core.DefaultTTL,
	RetryAfter:     time.Second,
	MaxValueLength: httpidem.DefaultMaxValueLength,
	ErrorHandler:   DefaultErrorHandler,
}

// ParamLock returns middleware that runs the requests naming the same
// values of params strictly one at a time, across all nodes sharing
// locks' backend; a request that finds the lock held gets 409 at once:
// e.POST("/sku/:sku/deduct", h, echomw.ParamLock(locks, "sku")). It
// panics if locks is nil or params is empty.
func ParamLock(locks *core.Client, params ...string) echo.MiddlewareFunc {
	cfg := DefaultParamLockConfig
	cfg.Locks, cfg.Params = locks, params
	return ParamLockWithConfig(cfg)
}

// ParamLockWithConfig returns the middleware for cfg. Like Echo's own
// constructors it panics, at start-up, if cfg is invalid (the message
// matches httpidem.ErrInvalidConfig); use cfg.ToMiddleware to get the
// error instead.
func ParamLockWithConfig(cfg ParamLockConfig) echo.MiddlewareFunc {
	return must(cfg.ToMiddleware())
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching httpidem.ErrInvalidConfig. It never panics.
func (cfg ParamLockConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	onError := orDefault(cfg.ErrorHandler)
	if len(cfg.Params) == 0 || slices.Contains(cfg.Params, "") {
		return nil, fmt.Errorf("%w: no Params", httpidem.ErrInvalidConfig)
	}
	params := slices.Clone(cfg.Params)
	g, err := httpidem.NewParamLockGuard(httpidem.ParamLockConfig{
		Locks: cfg.Locks, Name: cfg.Name, TTL: cfg.TTL, WaitTimeout: cfg.WaitTimeout, RetryAfter: cfg.RetryAfter,
		MaxValueLength: cfg.MaxValueLength, OnDecision: cfg.OnDecision, Observer: cfg.Observer,
	})
	if err != nil {
		return nil, err
	}
	return wrap(cfg.Skipper, cfg.BeforeFunc, func(c echo.Context, next echo.HandlerFunc) error {
		name := cfg.Name
		if name == "" {
			name = c.Path()
		}
		return drive(c, next, g.Begin(c.Request(), name, lockParams(c, params)), onError, false, nil)
	}), nil
}

// lockParams returns the values of params in c's route, in order. A route
// without one of them is a programming error: it panics.
func lockParams(c echo.Context, params []string) []httpidem.Param {
	all := routeParams(c)
	out := make([]httpidem.Param, len(params))
	for i, name := range params {
		j := slices.IndexFunc(all, func(p httpidem.Param) bool { return p.Name == name })
		if j < 0 {
			panic(fmt.Sprintf("echomw: ParamLock on route %q: the route has no parameter %q", c.Path(), name))
		}
		out[i] = all[j]
	}
	return out
}
