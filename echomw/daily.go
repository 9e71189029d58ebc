package echomw

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/httpidem"
)

// DailyConfig configures the Daily middleware. Store, Scope and
// IdentifierExtractor are required; the fields shared with
// httpidem.DailyConfig mean the same there, with the same defaults.
type DailyConfig struct {
	// Skipper returns true for requests passed through untouched. nil: none.
	Skipper func(c echo.Context) bool

	Store    httpidem.Store // required
	Scope    string         // required: "vote", "checkin"; [A-Za-z0-9._-]{1,64}
	Location *time.Location // nil: UTC

	// IdentifierExtractor returns the subject (who votes); an error or ""
	// answers 401 — never a shared bucket. Required.
	IdentifierExtractor func(c echo.Context) (string, error)

	// ObjectExtractor returns what is claimed; an error answers 400. nil:
	// the route's parameter values joined by "/" ("9" on /vote/:item),
	// "" on a route without parameters (one claim a day, a check-in). The
	// values are decoded as the request meant them — /vote/%4A and
	// /vote/%4a are /vote/J, and a value that cannot be decoded answers
	// 400 — and '%' and '/' in them are percent-encoded, so that two
	// tuples of values never make one object.
	ObjectExtractor func(c echo.Context) (string, error)

	// LocationExtractor, if set, returns the subject's own time zone; nil
	// results fall back to Location, errors answer 400.
	LocationExtractor func(c echo.Context) (*time.Location, error)

	Mode        httpidem.DailyMode    // ModeGate (zero) or ModeCount
	Approximate bool                  // ModeCount with a HyperLogLog
	Counted     bool                  // ModeGate also counts first claims
	Grace       time.Duration         // 0: httpidem.DefaultGrace
	Clock       func() time.Time      // nil: time.Now
	ReleaseOn   func(status int) bool // nil: status >= 500 (and panics) give the claim back
	FailOpen    bool                  // store down: pass; false: 503

	// DenyHandler answers a gated subject's later requests of the day
	// (identifier is the subject, err the 409 problem, with Retry-After until
	// local midnight); httpidem.TicketFromContext(c.Request().Context())
	// gives the day. nil: ErrorHandler(c, err).
	DenyHandler func(c echo.Context, identifier string, err error) error

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
	Skipper:      neverSkip,
	ErrorHandler: DefaultErrorHandler,
}

// Daily returns the gate of scope on store for the subject subject
// extracts, with DefaultDailyConfig:
// e.POST("/vote/:item", h, echomw.Daily(store, "vote", userID)).
func Daily(store httpidem.Store, scope string, subject func(c echo.Context) (string, error)) echo.MiddlewareFunc {
	cfg := DefaultDailyConfig
	cfg.Store, cfg.Scope, cfg.IdentifierExtractor = store, scope, subject
	return DailyWithConfig(cfg)
}

// DailyWithConfig returns the middleware for cfg. It never panics: if cfg
// is invalid every request fails with a 500 problem — call cfg.ToMiddleware
// at start-up to get the error instead.
func DailyWithConfig(cfg DailyConfig) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		return misconfigured(err, cfg.ErrorHandler)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching httpidem.ErrInvalidConfig.
func (cfg DailyConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	if cfg.Skipper == nil {
		cfg.Skipper = neverSkip
	}
	if cfg.ErrorHandler == nil {
		cfg.ErrorHandler = DefaultErrorHandler
	}
	if cfg.ReleaseOn == nil {
		cfg.ReleaseOn = httpidem.DefaultReleaseOn
	}
	if cfg.ObjectExtractor == nil {
		cfg.ObjectExtractor = routeParams
	}
	g, err := httpidem.NewGate(httpidem.DailyConfig{
		Store: cfg.Store, Scope: cfg.Scope, Location: cfg.Location, Mode: cfg.Mode,
		Approximate: cfg.Approximate, Counted: cfg.Counted, Grace: cfg.Grace, Clock: cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	if cfg.IdentifierExtractor == nil {
		return nil, fmt.Errorf("%w: nil IdentifierExtractor", httpidem.ErrInvalidConfig)
	}
	d := &daily{cfg: cfg, g: g}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper(c) {
				return next(c)
			}
			return d.serve(c, next)
		}
	}, nil
}

// routeParams is the default object: the route's parameter values,
// decoded (paramValue), with '%' and '/' percent-encoded and joined by "/".
func routeParams(c echo.Context) (string, error) {
	names := c.ParamNames()
	values := c.ParamValues()
	if len(names) == 0 {
		return "", nil
	}
	parts := make([]string, len(names))
	for i, name := range names {
		var raw string
		if i < len(values) {
			raw = values[i]
		}
		v, err := paramValue(c, raw)
		if err != nil {
			return "", fmt.Errorf("parameter %s: %w", name, err)
		}
		parts[i] = escapeParam(v, "/")
	}
	return strings.Join(parts, "/"), nil
}

type daily struct {
	cfg DailyConfig
	g   *httpidem.Gate
}

// start starts observing a request's decisions.
func (d *daily) start(ctx context.Context) (context.Context, reporter) {
	return startReport(ctx, d.cfg.Observer, d.cfg.OnDecision, httpidem.KindDaily, d.cfg.Scope)
}

// fail answers p, reported as the request's last decision.
func (d *daily) fail(c echo.Context, ctx context.Context, rep *reporter, o httpidem.Outcome, p *httpidem.Problem) error {
	rep.last(ctx, o, p.Status, p.Err)
	return d.cfg.ErrorHandler(c, p)
}

// invalid answers p to a request that could not be decided.
func (d *daily) invalid(c echo.Context, p *httpidem.Problem) error {
	ctx, rep := d.start(c.Request().Context())
	return d.fail(c, ctx, &rep, httpidem.OutcomeInvalid, p)
}

func (d *daily) serve(c echo.Context, next echo.HandlerFunc) error {
	subject, err := d.cfg.IdentifierExtractor(c)
	if err != nil || subject == "" {
		if err == nil {
			err = errors.New("empty subject")
		}
		return d.invalid(c, &httpidem.Problem{Status: http.StatusUnauthorized,
			Code: httpidem.CodeUnauthenticated, Detail: "the caller could not be identified",
			Err: fmt.Errorf("%w: %w", httpidem.ErrUnauthenticated, err)})
	}
	object, err := d.cfg.ObjectExtractor(c)
	if err != nil {
		return d.invalid(c, badRequest("the request does not name a valid object", err))
	}
	var loc *time.Location
	if d.cfg.LocationExtractor != nil {
		if loc, err = d.cfg.LocationExtractor(c); err != nil {
			return d.invalid(c, badRequest("the request's time zone is invalid", err))
		}
	}
	if d.cfg.Mode == httpidem.ModeCount {
		err := next(c)
		if s := statusOf(c, err); s >= 200 && s < 300 {
			d.count(c, subject, object, loc)
		}
		return err
	}
	req := c.Request()
	ctx, rep := d.start(req.Context())
	t, err := d.g.Take(ctx, subject, object, loc)
	if err != nil {
		if errors.Is(err, httpidem.ErrInvalidArgument) {
			return d.fail(c, ctx, &rep, httpidem.OutcomeInvalid, badRequest("the request's subject or object is invalid", err))
		}
		if d.cfg.FailOpen {
			rep.last(ctx, httpidem.OutcomeStoreError, 0, err)
			return next(c)
		}
		return d.fail(c, ctx, &rep, httpidem.OutcomeStoreError, &httpidem.Problem{Status: http.StatusServiceUnavailable,
			Code: httpidem.CodeStoreUnavailable, Detail: "claim store unavailable", Err: err})
	}
	c.SetRequest(req.WithContext(httpidem.NewTicketContext(ctx, t)))
	defer c.SetRequest(req)
	if !t.First {
		p := &httpidem.Problem{Status: http.StatusConflict, Code: httpidem.CodeAlreadyClaimed,
			Detail: "already done today; try again after local midnight", RetryAfter: t.RetryAfter, Err: httpidem.ErrAlreadyClaimed}
		if d.cfg.DenyHandler != nil {
			rep.last(ctx, httpidem.OutcomeDuplicate, 0, nil)
			return d.cfg.DenyHandler(c, subject, p)
		}
		return d.fail(c, ctx, &rep, httpidem.OutcomeDuplicate, p)
	}
	rep.decided(ctx, httpidem.OutcomeFirst, 0, nil)
	ok := false
	defer func() {
		if !ok { // a panic: give the claim back, let it propagate to Recover
			rep.last(ctx, httpidem.OutcomeReleased, 0, t.Release(ctx))
		}
	}()
	err = next(c)
	ok = true
	if d.cfg.ReleaseOn(statusOf(c, err)) {
		rep.last(ctx, httpidem.OutcomeReleased, 0, t.Release(ctx))
	} else {
		rep.close(httpidem.OutcomeFirst, 0, nil) // kept, as decided
	}
	return err
}

// count takes a ModeCount claim after a successful answer.
func (d *daily) count(c echo.Context, subject, object string, loc *time.Location) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 5*time.Second)
	defer cancel()
	ctx, rep := d.start(ctx)
	t, err := d.g.Take(ctx, subject, object, loc)
	switch {
	case err != nil:
		rep.last(ctx, httpidem.OutcomeStoreError, 0, err)
	case t.First:
		rep.last(ctx, httpidem.OutcomeFirst, 0, nil)
	default:
		rep.last(ctx, httpidem.OutcomeDuplicate, 0, nil)
	}
}

func badRequest(detail string, err error) *httpidem.Problem {
	return &httpidem.Problem{Status: http.StatusBadRequest, Code: httpidem.CodeBadRequest, Detail: detail,
		Err: fmt.Errorf("%w: %w", httpidem.ErrBadRequest, err)}
}
