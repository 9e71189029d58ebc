package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nilness"
)

// DefaultMaxValueLength is the longest parameter value ParamLockGuard
// accepts when ParamLockConfig.MaxValueLength is zero.
const DefaultMaxValueLength = 128

// ParamLockConfig configures NewParamLockGuard: a lock named by a request's
// route parameters (one SKU, one order), held while its handler runs.
// Locks is required; zero fields take the defaults documented on them.
type ParamLockConfig struct {
	// Locks takes the locks: one core.Client per backend, shared. Required.
	Locks *core.Client

	// Name is the lock's name when Begin is given none: 1 to 256 bytes of
	// UTF-8 without control characters. "": Begin must name it.
	Name string

	// TTL is the lease length; the lease is renewed every TTL/3 while the
	// handler runs. 0: core.DefaultTTL (30s).
	TTL time.Duration

	// WaitTimeout is how long a request waits for the lock (woken when it
	// is released). 0: no wait — 409 with Retry-After at once.
	WaitTimeout time.Duration

	// RetryAfter is the Retry-After of a 409. 0: one second.
	RetryAfter time.Duration

	// MaxValueLength caps each parameter value, decoded, in bytes, at most
	// 256. 0: DefaultMaxValueLength (128).
	MaxValueLength int

	// OnDecision, if set, is called with every decision (Kind
	// KindParamLock, Scope the lock name without values).
	OnDecision func(ctx context.Context, d Decision)

	// Observer, if set, traces the decisions (see Observer): its span
	// covers the acquisition, the handler and the release, so the Locks'
	// own spans (when the core.Client is observed too) nest under it.
	// nil: none.
	Observer Observer
}

// A Param is a route parameter that names a lock or an object.
type Param struct {
	Name  string // the parameter's name in the route: "sku"
	Value string // its value in the request
	// Escaped says Value is still percent-encoded (Echo routes on the
	// escaped path when the request has one, and its values stay encoded):
	// it is decoded first, and a value that cannot be decoded is
	// ErrInvalidParam.
	Escaped bool
}

// value returns p's value as the request meant it.
func (p Param) value() (string, error) {
	if !p.Escaped {
		return p.Value, nil
	}
	v, err := url.PathUnescape(p.Value)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrInvalidParam, p.Name, err)
	}
	return v, nil
}

// JoinParams returns the values of params, decoded, with '%' and '/'
// percent-encoded and joined by "/" — so that two tuples of values never
// make one string ("9" for one parameter 9; "" for none). It is the
// default Daily object of package echomw. A value that cannot be decoded
// is an error matching ErrInvalidParam.
func JoinParams(params []Param) (string, error) {
	parts := make([]string, len(params))
	for i, p := range params {
		v, err := p.value()
		if err != nil {
			return "", err
		}
		parts[i] = escapeSeps(v, "/")
	}
	return strings.Join(parts, "/"), nil
}

// escapeSeps returns s with '%' and the bytes of seps percent-encoded;
// a value without them is returned as it is.
func escapeSeps(s, seps string) string {
	const hex = "0123456789ABCDEF"
	if !strings.ContainsAny(s, seps) && !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || strings.IndexByte(seps, c) >= 0 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// A ParamLockGuard runs the requests that name the same parameter values
// strictly one at a time, across every node sharing its Locks' backend: it
// is the framework-neutral driver of package echomw's ParamLock. Adapters
// drive its Begin as the Call doc shows. It is safe for concurrent use.
type ParamLockGuard struct {
	cfg  ParamLockConfig
	opts []core.LockOption
}

// NewParamLockGuard validates cfg, fills its zero fields and returns its
// guard. The error matches ErrInvalidConfig.
func NewParamLockGuard(cfg ParamLockConfig) (*ParamLockGuard, error) {
	fillDefaults(&cfg.TTL, core.DefaultTTL)
	fillDefaults(&cfg.RetryAfter, time.Second)
	fillDefaults(&cfg.MaxValueLength, DefaultMaxValueLength)
	switch {
	case nilness.IsNil(cfg.Locks):
		return nil, fmt.Errorf("%w: nil Locks", ErrInvalidConfig)
	case cfg.TTL < time.Millisecond || cfg.WaitTimeout < 0 || cfg.RetryAfter < 0:
		return nil, fmt.Errorf("%w: TTL %v, WaitTimeout %v, RetryAfter %v", ErrInvalidConfig, cfg.TTL, cfg.WaitTimeout, cfg.RetryAfter)
	case cfg.MaxValueLength < 0 || cfg.MaxValueLength > 256:
		return nil, fmt.Errorf("%w: MaxValueLength %d (want 1 to 256)", ErrInvalidConfig, cfg.MaxValueLength)
	case cfg.Name != "" && name.Check(cfg.Name, maxLockNameLen) != "":
		return nil, fmt.Errorf("%w: Name %q: %s", ErrInvalidConfig, cfg.Name, name.Check(cfg.Name, maxLockNameLen))
	}
	opts := []core.LockOption{core.WithTTL(cfg.TTL)}
	if cfg.WaitTimeout > 0 {
		opts = append(opts, core.WithWaitTimeout(cfg.WaitTimeout))
	} else {
		opts = append(opts, core.WithRetryBudget(0))
	}
	return &ParamLockGuard{cfg: cfg, opts: opts}, nil
}

// lockSeps are the bytes escaped in the parameter names and values of a
// lock key: its separators, and ':' so that a lock name taken from the
// key's part before its first ':' (otel's default) never holds a value.
const lockSeps = "|=:"

// maxLockNameLen is the longest ParamLock name.
const maxLockNameLen = 256

// LockKey returns the lock key of lock and params:
// "<lock>|<param>=<value>|...", with '%', '|' and '=' percent-encoded in
// lock, and each value decoded and, like the parameter names, with '%',
// '|', '=' and ':' percent-encoded — two (lock, values) tuples never share
// a lock, and a lock name cut at the key's first ':' (package otel's
// default) never holds a value. The error is a 400 *Problem
// matching ErrInvalidParam: a value empty, over MaxValueLength,
// undecodable, not UTF-8 or with control characters.
func (g *ParamLockGuard) LockKey(lock string, params []Param) (string, error) {
	var b strings.Builder
	b.WriteString(escapeSeps(lock, "|="))
	for _, p := range params {
		v, err := p.value()
		if err != nil {
			return "", newProblem(http.StatusBadRequest, CodeInvalidRequest,
				fmt.Sprintf("parameter %s is not validly percent-encoded", p.Name), err)
		}
		if why := name.Check(v, g.cfg.MaxValueLength); why != "" {
			return "", newProblem(http.StatusBadRequest, CodeInvalidRequest,
				fmt.Sprintf("parameter %s must be 1 to %d bytes of UTF-8 without control characters", p.Name, g.cfg.MaxValueLength),
				fmt.Errorf("%w: %s: %s", ErrInvalidParam, p.Name, why))
		}
		b.WriteByte('|')
		b.WriteString(escapeSeps(p.Name, lockSeps))
		b.WriteByte('=')
		b.WriteString(escapeSeps(v, lockSeps))
	}
	if b.Len() > core.MaxKeyLen {
		return "", newProblem(http.StatusBadRequest, CodeInvalidRequest, "the parameters are too long",
			fmt.Errorf("%w: lock key of %d bytes", ErrInvalidParam, b.Len()))
	}
	return b.String(), nil
}

// Begin decides r under the lock named lock ("": the config's Name) and
// params: ActionRun once the lock is held — Call.Request's context is
// cancelled, with a cause matching ErrLost, if the lock is lost, and
// Finish releases it — or ActionAnswer: 400 (ErrInvalidParam), 409 with
// Retry-After (ErrLocked, matching core.ErrNotAcquired) or 503
// (ErrUnavailable). A missing or invalid name is a programming error:
// Begin panics.
func (g *ParamLockGuard) Begin(r *http.Request, lock string, params []Param) *Call {
	if lock == "" {
		lock = g.cfg.Name
	}
	if why := name.Check(lock, maxLockNameLen); why != "" {
		panic(fmt.Sprintf("httpidem: ParamLockGuard.Begin: lock name %q: %s", lock, why))
	}
	ctx, rep := startReport(r.Context(), g.cfg.Observer, g.cfg.OnDecision, KindParamLock, lock)
	reject := func(o Outcome, p *Problem) *Call {
		rep.last(ctx, o, p.Status, p.Err)
		return answer(r, p)
	}
	key, err := g.LockKey(lock, params)
	if err != nil {
		return reject(OutcomeInvalid, err.(*Problem))
	}
	lk, err := g.cfg.Locks.Lock(ctx, key, g.opts...)
	switch {
	case errors.Is(err, core.ErrNotAcquired):
		p := newProblem(http.StatusConflict, CodeLocked, "another request is working on this resource; retry later",
			fmt.Errorf("%w: %w", ErrLocked, err))
		p.RetryAfter = g.cfg.RetryAfter
		return reject(OutcomeLocked, p)
	case err != nil:
		return reject(OutcomeStoreError, newProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"lock service unavailable", fmt.Errorf("%w: %w", ErrUnavailable, err)))
	}
	return runHeld(ctx, r, rep, lk)
}

// runHeld runs r under lk, a lock or permit just taken: its context is
// cancelled, with a cause matching ErrLost, if lk is lost, and Finish or
// Abort releases lk.
func runHeld(ctx context.Context, r *http.Request, rep reporter, lk *core.Lock) *Call {
	rep.decided(ctx, OutcomeAcquired, 0, nil)
	runCtx, cancel := context.WithCancelCause(lk.WithContext(ctx))
	h := &holder{lk: lk, ctx: ctx, cancel: cancel, done: make(chan struct{}), rep: rep}
	go h.watch()
	return &Call{action: ActionRun, req: r.WithContext(runCtx), run: h}
}

// holder runs a request under its parameter lock.
type holder struct {
	lk     *core.Lock
	ctx    context.Context // the observed request context
	cancel context.CancelCauseFunc
	done   chan struct{}
	rep    reporter
}

// watch cancels the request context when the lock is lost.
func (h *holder) watch() {
	select {
	case <-h.lk.Lost():
		h.cancel(fmt.Errorf("%w: %w", ErrLost, h.lk.Err()))
	case <-h.done:
	}
}

func (h *holder) writer(w http.ResponseWriter) http.ResponseWriter { return w }

// release stops the watch and releases the lock; it returns the loss, if
// the lock was lost, or the release's failure.
func (h *holder) release() (lost, failed error) {
	close(h.done)
	h.cancel(context.Canceled)
	ctx, cancel := finishContext(h.ctx)
	defer cancel()
	err := h.lk.Release(ctx)
	if l := h.lk.Err(); l != nil || errors.Is(err, core.ErrNotHeld) {
		if l == nil {
			l = err
		}
		return fmt.Errorf("%w: %w", ErrLost, l), nil
	}
	return nil, err
}

func (h *holder) finish(int) *Problem {
	lost, failed := h.release()
	switch {
	case lost != nil:
		h.rep.last(h.ctx, OutcomeLockLost, 0, lost)
		return newProblem(http.StatusServiceUnavailable, CodeLockLost, "the lock on this resource was lost; retry", lost)
	case failed != nil: // the lease expires by its TTL
		h.rep.last(h.ctx, OutcomeStoreError, 0, fmt.Errorf("%w: %w", ErrUnavailable, failed))
	default:
		h.rep.close(OutcomeAcquired, 0, nil) // ran and released
	}
	return nil
}

// abort releases the lock of a handler that panicked.
func (h *holder) abort() {
	_, _ = h.release()
	h.rep.close(OutcomeAcquired, 0, nil)
}
