package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nilness"
)

// LimitConfig configures NewLimitGuard and Limit: at most Limit requests of
// one key (a tenant, a user, a route parameter) in flight at once, across
// every process whose Locks share a backend. Locks, Limit and Key are
// required; zero fields take the defaults documented on them.
type LimitConfig struct {
	// Locks hands out the permits (core.Client.Semaphore): one core.Client
	// per backend, shared. Required.
	Locks *core.Client

	// Limit is how many requests of one key may run at once: 1 to
	// core.MaxSemaphoreLimit. Required.
	Limit int

	// Key returns the key a request is limited under. An error answers
	// 401 (ErrUnauthenticated): the caller could not be identified.
	// Keys are 1 to 256 bytes of UTF-8 without control characters; any
	// other answers 400 (ErrInvalidParam). Required.
	Key func(r *http.Request) (string, error)

	// Name names the limit in its storage keys and in decisions (Scope):
	// 1 to 256 bytes of UTF-8 without control characters, a fixed name,
	// never an ID. "": "limit".
	Name string

	// TTL is each permit's lease length; the lease is renewed every TTL/3
	// while the handler runs, so a crashed process gives its permits back
	// within TTL. 0: core.DefaultTTL (30s).
	TTL time.Duration

	// WaitTimeout is how long a request waits for a permit (woken when one
	// is given back). 0: no wait — 429 with Retry-After at once.
	WaitTimeout time.Duration

	// RetryAfter is the Retry-After of a 429. 0: one second.
	RetryAfter time.Duration

	// OnDecision, if set, is called with every decision (Kind KindLimit,
	// Scope the Name).
	OnDecision func(ctx context.Context, d Decision)

	// Observer, if set, traces the decisions (see Observer): its span
	// covers the acquisition, the handler and the release. nil: none.
	Observer Observer
}

// maxLimitKeyLen is the longest key a LimitConfig.Key may return.
const maxLimitKeyLen = 256

// A LimitGuard runs at most Limit requests of one key at once: the
// framework-neutral driver of Limit (and of echomw's Limit). Each running
// request holds a permit of a core.Semaphore, renewed while its handler
// runs and given back when it ends — answered, failed or panicked.
type LimitGuard struct {
	cfg  LimitConfig
	opts []core.LockOption
}

// NewLimitGuard returns the guard of cfg, or an error matching
// ErrInvalidConfig that says what is wrong.
func NewLimitGuard(cfg LimitConfig) (*LimitGuard, error) {
	fillDefaults(&cfg.TTL, core.DefaultTTL)
	fillDefaults(&cfg.RetryAfter, time.Second)
	if cfg.Name == "" {
		cfg.Name = "limit"
	}
	switch {
	case nilness.IsNil(cfg.Locks):
		return nil, fmt.Errorf("%w: nil Locks", ErrInvalidConfig)
	case cfg.Key == nil:
		return nil, fmt.Errorf("%w: nil Key", ErrInvalidConfig)
	case cfg.Limit < 1 || cfg.Limit > core.MaxSemaphoreLimit:
		return nil, fmt.Errorf("%w: Limit %d (want 1 to %d)", ErrInvalidConfig, cfg.Limit, core.MaxSemaphoreLimit)
	case cfg.TTL < time.Millisecond || cfg.WaitTimeout < 0 || cfg.RetryAfter < 0:
		return nil, fmt.Errorf("%w: TTL %v, WaitTimeout %v, RetryAfter %v", ErrInvalidConfig, cfg.TTL, cfg.WaitTimeout, cfg.RetryAfter)
	case name.Check(cfg.Name, maxLockNameLen) != "":
		return nil, fmt.Errorf("%w: Name %q: %s", ErrInvalidConfig, cfg.Name, name.Check(cfg.Name, maxLockNameLen))
	case len(escapeSeps(cfg.Name, "|"))+1+maxLimitKeyLen > core.MaxKeyLen:
		return nil, fmt.Errorf("%w: Name %q: too long once escaped", ErrInvalidConfig, cfg.Name)
	}
	opts := []core.LockOption{core.WithTTL(cfg.TTL)}
	if cfg.WaitTimeout > 0 {
		opts = append(opts, core.WithWaitTimeout(cfg.WaitTimeout))
	} else {
		opts = append(opts, core.WithRetryBudget(0))
	}
	return &LimitGuard{cfg: cfg, opts: opts}, nil
}

// Begin decides r: ActionRun once it holds a permit of its key —
// Call.Request's context is cancelled, with a cause matching ErrLost, if
// the permit is lost, and Finish (or Abort) gives it back — or
// ActionAnswer: 401 (ErrUnauthenticated), 400 (ErrInvalidParam), 429 with
// Retry-After (ErrLimited, matching core.ErrNotAcquired) or 503
// (ErrUnavailable).
func (g *LimitGuard) Begin(r *http.Request) *Call {
	ctx, rep := startReport(r.Context(), g.cfg.Observer, g.cfg.OnDecision, KindLimit, g.cfg.Name)
	reject := func(o Outcome, p *Problem) *Call {
		rep.last(ctx, o, p.Status, p.Err)
		return answer(r, p)
	}
	key, err := g.cfg.Key(r)
	if err != nil {
		return reject(OutcomeUnauthenticated, newProblem(http.StatusUnauthorized, CodeUnauthenticated,
			"the caller could not be identified (see LimitConfig.Key)", fmt.Errorf("%w: %w", ErrUnauthenticated, err)))
	}
	if why := name.Check(key, maxLimitKeyLen); why != "" {
		return reject(OutcomeInvalid, newProblem(http.StatusBadRequest, CodeInvalidRequest,
			"the request's limit key is invalid", fmt.Errorf("%w: limit key: %s", ErrInvalidParam, why)))
	}
	sem := g.cfg.Locks.Semaphore(escapeSeps(g.cfg.Name, "|")+"|"+key, g.cfg.Limit)
	lk, err := sem.Acquire(ctx, g.opts...)
	switch {
	case errors.Is(err, core.ErrNotAcquired):
		p := newProblem(http.StatusTooManyRequests, CodeLimited, "too many requests in flight; retry later",
			fmt.Errorf("%w: %w", ErrLimited, err))
		p.RetryAfter = g.cfg.RetryAfter
		return reject(OutcomeLimited, p)
	case err != nil:
		return reject(OutcomeStoreError, newProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"lock service unavailable", fmt.Errorf("%w: %w", ErrUnavailable, err)))
	}
	return runHeld(ctx, r, rep, lk)
}

// Limit returns net/http middleware that runs at most cfg.Limit requests
// of one key at once (see LimitGuard). Like Echo's middleware
// constructors it panics, at start-up, if cfg is invalid (the message
// matches ErrInvalidConfig and says what is wrong); use cfg.ToMiddleware
// to get the error instead.
func Limit(cfg LimitConfig) func(http.Handler) http.Handler {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching ErrInvalidConfig. It never panics.
func (cfg LimitConfig) ToMiddleware() (func(http.Handler) http.Handler, error) {
	g, err := NewLimitGuard(cfg)
	if err != nil {
		return nil, err
	}
	write := problemWriter(nil)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serve(w, next, g.Begin(r), write, nil)
		})
	}, nil
}
