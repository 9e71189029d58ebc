package echomw

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/latchkey/latchkey/httpidem"
)

// DailyConfig configures the Daily middleware. Store, Scope and Subject
// are required; the fields shared with httpidem.DailyConfig mean the same
// there, with the same defaults.
type DailyConfig struct {
	// Skipper returns true for requests passed through untouched. nil:
	// middleware.DefaultSkipper (none).
	Skipper middleware.Skipper

	// BeforeFunc, if set, runs before the middleware decides a request
	// that the Skipper did not skip.
	BeforeFunc middleware.BeforeFunc

	Store    httpidem.ClaimStore // required; ModeCount and Counted need an httpidem.ClaimCounter
	Scope    string              // required: "vote", "checkin"; 1 to 64 bytes of UTF-8, no control characters
	Location *time.Location      // nil: UTC

	// Subject returns who acts (a user ID); an error or "" answers 401 —
	// never a shared bucket. Required.
	Subject middleware.Extractor

	// Object returns what is claimed; an error answers 400. nil: the
	// route's parameter values joined by "/" ("9" on /vote/:item), "" on
	// a route without parameters (one claim a day, a check-in). The values
	// are decoded as the request meant them — /vote/%4A and /vote/%4a are
	// /vote/J, and a value that cannot be decoded answers 400 — and '%'
	// and '/' in them are percent-encoded, so that two tuples of values
	// never make one object (httpidem.JoinParams).
	Object middleware.Extractor

	// LocationFor, if set, returns the subject's own time zone; nil
	// results fall back to Location, errors answer 400.
	LocationFor func(c echo.Context) (*time.Location, error)

	Mode        httpidem.DailyMode    // ModeGate (zero) or ModeCount
	Approximate bool                  // ModeCount with a HyperLogLog
	Counted     bool                  // ModeGate also counts first claims
	Grace       time.Duration         // 0: httpidem.DefaultGrace
	Clock       func() time.Time      // nil: time.Now
	ReleaseOn   func(status int) bool // nil: status >= 500 (and panics) give the claim back
	FailOpen    bool                  // store down: pass; false: 503

	// DuplicateHandler answers a gated subject's later requests of the day
	// (subject is the subject; err is the 409 *httpidem.Problem, with
	// Retry-After until local midnight);
	// httpidem.TicketFromContext(c.Request().Context()) gives the day.
	// nil: ErrorHandler(c, err).
	DuplicateHandler func(c echo.Context, subject string, err error) error

	// ErrorHandler answers the middleware's errors. nil: DefaultErrorHandler.
	ErrorHandler func(c echo.Context, err error) error

	// OnDecision, if set, is called with every decision (httpidem.Decision).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces and measures the decisions
	// (httpidem.Observer; package otel's Instrumentation is one). nil: none.
	Observer httpidem.Observer
}

// DefaultDailyConfig holds the Echo-specific defaults.
var DefaultDailyConfig = DailyConfig{
	Skipper:      middleware.DefaultSkipper,
	ErrorHandler: DefaultErrorHandler,
}

// Daily returns the gate of scope on store for the subject subject
// extracts, with DefaultDailyConfig:
// e.POST("/vote/:item", h, echomw.Daily(store, "vote", userID)). It panics
// if the config this makes is invalid.
func Daily(store httpidem.ClaimStore, scope string, subject middleware.Extractor) echo.MiddlewareFunc {
	cfg := DefaultDailyConfig
	cfg.Store, cfg.Scope, cfg.Subject = store, scope, subject
	return DailyWithConfig(cfg)
}

// DailyWithConfig returns the middleware for cfg. Like Echo's own
// constructors it panics, at start-up, if cfg is invalid (the message
// matches httpidem.ErrInvalidConfig); use cfg.ToMiddleware to get the
// error instead.
func DailyWithConfig(cfg DailyConfig) echo.MiddlewareFunc {
	return must(cfg.ToMiddleware())
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching httpidem.ErrInvalidConfig. It never panics.
func (cfg DailyConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	if cfg.Object == nil {
		cfg.Object = routeObject
	}
	onError := orDefault(cfg.ErrorHandler)
	hcfg := httpidem.DailyConfig{
		Store: cfg.Store, Scope: cfg.Scope, Location: cfg.Location, Mode: cfg.Mode,
		Approximate: cfg.Approximate, Counted: cfg.Counted, Grace: cfg.Grace, Clock: cfg.Clock,
		ReleaseOn: cfg.ReleaseOn, FailOpen: cfg.FailOpen, OnDecision: cfg.OnDecision, Observer: cfg.Observer,
	}
	g, err := httpidem.NewDailyGuard(hcfg)
	if err != nil {
		return nil, err
	}
	if cfg.Subject == nil {
		return nil, fmt.Errorf("%w: nil Subject", httpidem.ErrInvalidConfig)
	}
	var dup func(echo.Context, *httpidem.Problem) error
	if cfg.DuplicateHandler != nil {
		dup = func(c echo.Context, p *httpidem.Problem) error {
			var subject string
			if t, ok := httpidem.TicketFromContext(c.Request().Context()); ok {
				subject = t.Subject
			}
			return cfg.DuplicateHandler(c, subject, p)
		}
	}
	return wrap(cfg.Skipper, cfg.BeforeFunc, func(c echo.Context, next echo.HandlerFunc) error {
		ex := httpidem.DailyExtractors{Subject: extractor(c, cfg.Subject), Object: extractor(c, cfg.Object)}
		if cfg.LocationFor != nil {
			ex.Location = func(*http.Request) (*time.Location, error) { return cfg.LocationFor(c) }
		}
		return drive(c, next, g.Begin(c.Request(), ex), onError, false, dup)
	}), nil
}
