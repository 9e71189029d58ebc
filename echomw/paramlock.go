package echomw

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

// KindParamLock is the Decision.Kind of ParamLock.
const KindParamLock = "paramlock"

// ParamLock outcomes, beside httpidem's OutcomeStoreError.
const (
	OutcomeAcquired httpidem.Outcome = "acquired" // the lock was taken; the handler runs
	OutcomeLocked   httpidem.Outcome = "locked"   // 409: held by another request
	OutcomeLockLost httpidem.Outcome = "lock_lost"
)

// DefaultMaxValueLength is the longest parameter value ParamLock accepts
// when ParamLockConfig.MaxValueLength is zero.
const DefaultMaxValueLength = 128

// ParamLockConfig configures ParamLock. Locker and Params are required.
type ParamLockConfig struct {
	// Skipper returns true for requests passed through unlocked. nil: none.
	Skipper func(c echo.Context) bool

	// Locker takes the locks: one core.Client per backend, shared. Required.
	Locker *core.Client

	// Params are the route parameters whose values name the lock, in
	// order: {"sku"} on /sku/:sku/deduct. Required; a route without one of
	// them fails with a 500 problem (ErrInvalidConfig).
	Params []string

	// Name is the lock's name, to which the parameter values are added. ""
	// : the route template, c.Path() ("/sku/:sku/deduct") — never the raw
	// URL. Give two routes the same Name to make them exclude each other.
	//
	// The lock key is "<Name>|<param>=<value>|...". Each value is decoded
	// as the request meant it (/sku/%41 is /sku/A; a value that cannot be
	// decoded answers 400), and '%', '|', '=' and ':' in the parameter
	// names and values are percent-encoded: two tuples of values never
	// share a lock, and a lock name cut at the key's first ':' (package
	// otel's default) comes from Name or the route template only, never
	// from a client's value — "_OTHER" when Name has no ':'; cut at the
	// first '|' instead to name locks by their whole Name (see
	// otel.WithLockName).
	Name string

	// TTL is the lease length; the lease is renewed every TTL/3 while the
	// handler runs. 0: core.DefaultTTL (30s).
	TTL time.Duration

	// WaitTimeout is how long a request waits for the lock (woken when it
	// is released). 0: no wait — 409 with Retry-After at once.
	WaitTimeout time.Duration

	// RetryAfter is the Retry-After of a 409. 0: one second.
	RetryAfter time.Duration

	// MaxValueLength caps each parameter value, decoded, in bytes. 0:
	// DefaultMaxValueLength (128).
	MaxValueLength int

	// ErrorHandler answers the middleware's errors. nil: DefaultErrorHandler.
	ErrorHandler func(c echo.Context, err error) error

	// OnDecision, if set, is called with every decision (Kind
	// KindParamLock, Scope the lock name without values).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces the decisions (httpidem.Observer; package
	// otel's Instrumentation is one): its span covers the acquisition, the
	// handler and the release, so the Locker's own spans (when the
	// core.Client is observed too) nest under it. nil: none.
	Observer httpidem.Observer
}

// DefaultParamLockConfig holds the defaults of ParamLockConfig.
var DefaultParamLockConfig = ParamLockConfig{
	Skipper:        neverSkip,
	TTL:            core.DefaultTTL,
	RetryAfter:     time.Second,
	MaxValueLength: DefaultMaxValueLength,
	ErrorHandler:   DefaultErrorHandler,
}

// ParamLock returns middleware that runs the requests naming the same
// values of params strictly one at a time, across all nodes sharing
// locker's backend; a request that finds the lock held gets 409 at once:
// e.POST("/sku/:sku/deduct", h, echomw.ParamLock(locks, "sku")).
func ParamLock(locker *core.Client, params ...string) echo.MiddlewareFunc {
	cfg := DefaultParamLockConfig
	cfg.Locker, cfg.Params = locker, params
	return ParamLockWithConfig(cfg)
}

// ParamLockWithConfig returns the middleware for cfg. It never panics: if
// cfg is invalid every request fails with a 500 problem — call
// cfg.ToMiddleware at start-up to get the error instead.
func ParamLockWithConfig(cfg ParamLockConfig) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		return misconfigured(err, cfg.ErrorHandler)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching ErrInvalidConfig.
func (cfg ParamLockConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	d := DefaultParamLockConfig
	if cfg.Skipper == nil {
		cfg.Skipper = d.Skipper
	}
	if cfg.TTL == 0 {
		cfg.TTL = d.TTL
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = d.RetryAfter
	}
	if cfg.MaxValueLength == 0 {
		cfg.MaxValueLength = d.MaxValueLength
	}
	if cfg.ErrorHandler == nil {
		cfg.ErrorHandler = d.ErrorHandler
	}
	switch {
	case cfg.Locker == nil:
		return nil, fmt.Errorf("%w: nil Locker", ErrInvalidConfig)
	case len(cfg.Params) == 0 || slices.Contains(cfg.Params, ""):
		return nil, fmt.Errorf("%w: no Params", ErrInvalidConfig)
	case cfg.TTL < time.Millisecond || cfg.WaitTimeout < 0 || cfg.RetryAfter < 0:
		return nil, fmt.Errorf("%w: TTL %v, WaitTimeout %v, RetryAfter %v", ErrInvalidConfig, cfg.TTL, cfg.WaitTimeout, cfg.RetryAfter)
	case cfg.MaxValueLength < 0 || cfg.MaxValueLength > 256:
		return nil, fmt.Errorf("%w: MaxValueLength %d (want 1 to 256)", ErrInvalidConfig, cfg.MaxValueLength)
	case len(cfg.Name) > 256 || !validValue(cfg.Name):
		return nil, fmt.Errorf("%w: Name %q: at most 256 bytes without braces or control characters", ErrInvalidConfig, cfg.Name)
	}
	cfg.Params = slices.Clone(cfg.Params)
	opts := []core.LockOption{core.WithTTL(cfg.TTL)}
	if cfg.WaitTimeout > 0 {
		opts = append(opts, core.WithWaitTimeout(cfg.WaitTimeout))
	} else {
		opts = append(opts, core.WithRetryBudget(0))
	}
	pl := &paramLock{cfg: cfg, opts: opts}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper(c) {
				return next(c)
			}
			return pl.serve(c, next)
		}
	}, nil
}

type paramLock struct {
	cfg  ParamLockConfig
	opts []core.LockOption
}

// validValue reports whether v has no braces (they would change the Redis
// Cluster hash tag of the lock) and no control characters.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// keySeps are the bytes escaped in the parameter names and values of a
// lock key: its separators, and ':' so that a lock name taken from the
// key's part before its first ':' (otel.DefaultLockName) never holds a
// value.
const keySeps = "|=:"

// lockName builds "<name>|<param>=<value>|..." from the route, the values
// decoded (paramValue) and, like the parameter names, with '%' and
// keySeps percent-encoded.
func (pl *paramLock) lockName(c echo.Context) (name, key string, p *httpidem.Problem) {
	name = pl.cfg.Name
	if name == "" {
		name = c.Path()
	}
	if name == "" || !validValue(name) {
		return "", "", misconfiguredProblem(fmt.Errorf("%w: no usable route template (%q); set Name", ErrInvalidConfig, name))
	}
	var b strings.Builder
	b.WriteString(name)
	for _, param := range pl.cfg.Params {
		if !slices.Contains(c.ParamNames(), param) {
			return name, "", misconfiguredProblem(fmt.Errorf("%w: route %s has no parameter %q", ErrInvalidConfig, c.Path(), param))
		}
		v, err := paramValue(c, c.Param(param))
		if err != nil {
			return name, "", &httpidem.Problem{Status: http.StatusBadRequest, Code: httpidem.CodeBadRequest,
				Detail: fmt.Sprintf("parameter %s is not validly percent-encoded", param),
				Err:    fmt.Errorf("%w: %s: %w", ErrInvalidParam, param, err)}
		}
		if v == "" || len(v) > pl.cfg.MaxValueLength || !validValue(v) {
			return name, "", &httpidem.Problem{Status: http.StatusBadRequest, Code: httpidem.CodeBadRequest,
				Detail: fmt.Sprintf("parameter %s must be 1 to %d bytes without braces or control characters", param, pl.cfg.MaxValueLength),
				Err:    fmt.Errorf("%w: %s", ErrInvalidParam, param)}
		}
		b.WriteByte('|')
		b.WriteString(escapeParam(param, keySeps))
		b.WriteByte('=')
		b.WriteString(escapeParam(v, keySeps))
	}
	if b.Len() > core.MaxKeyLen {
		return name, "", &httpidem.Problem{Status: http.StatusBadRequest, Code: httpidem.CodeBadRequest,
			Detail: "the parameters are too long", Err: fmt.Errorf("%w: lock key of %d bytes", ErrInvalidParam, b.Len())}
	}
	return name, b.String(), nil
}

func misconfiguredProblem(err error) *httpidem.Problem {
	return &httpidem.Problem{Status: http.StatusInternalServerError, Code: httpidem.CodeMisconfigured,
		Detail: "the server is misconfigured", Err: err}
}

func (pl *paramLock) serve(c echo.Context, next echo.HandlerFunc) error {
	name, key, p := pl.lockName(c)
	req := c.Request()
	ctx, rep := startReport(req.Context(), pl.cfg.Observer, pl.cfg.OnDecision, KindParamLock, name)
	if p != nil {
		rep.last(ctx, httpidem.OutcomeInvalid, p.Status, p.Err)
		return pl.cfg.ErrorHandler(c, p)
	}
	var herr error
	ran := false
	defer func() { // a panicking handler: Do has released the lock
		if ran {
			rep.close(OutcomeAcquired, 0, nil)
		}
	}()
	err := pl.cfg.Locker.Do(ctx, key, func(ctx context.Context) error {
		ran = true
		rep.decided(ctx, OutcomeAcquired, 0, nil)
		c.SetRequest(req.WithContext(ctx)) // cancelled if the lock is lost
		defer c.SetRequest(req)
		herr = next(c)
		return nil
	}, pl.opts...)
	switch {
	case !ran && errors.Is(err, core.ErrNotAcquired):
		p := &httpidem.Problem{Status: http.StatusConflict, Code: CodeLocked, RetryAfter: pl.cfg.RetryAfter,
			Detail: "another request is working on this resource; retry later", Err: fmt.Errorf("%w: %w", ErrLocked, err)}
		rep.last(ctx, OutcomeLocked, p.Status, p.Err)
		return pl.cfg.ErrorHandler(c, p)
	case !ran:
		p := &httpidem.Problem{Status: http.StatusServiceUnavailable, Code: httpidem.CodeStoreUnavailable,
			Detail: "lock service unavailable", Err: fmt.Errorf("%w: %w", httpidem.ErrStoreUnavailable, err)}
		rep.last(ctx, httpidem.OutcomeStoreError, p.Status, p.Err)
		return pl.cfg.ErrorHandler(c, p)
	case errors.Is(err, core.ErrLost):
		lost := fmt.Errorf("%w: %w", ErrLockLost, err)
		rep.last(ctx, OutcomeLockLost, 0, lost)
		if herr != nil {
			return herr
		}
		if c.Response().Committed {
			return lost
		}
		return pl.cfg.ErrorHandler(c, &httpidem.Problem{Status: http.StatusServiceUnavailable, Code: CodeLockLost,
			Detail: "the lock on this resource was lost; retry", Err: lost})
	case err != nil: // the release failed; the lease expires by its TTL
		rep.last(ctx, httpidem.OutcomeStoreError, 0, err)
	default:
		rep.close(OutcomeAcquired, 0, nil) // ran and released
	}
	return herr
}
