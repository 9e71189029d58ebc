package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/latchkey/latchkey/internal/nilness"
)

// completeTimeout bounds storing a record and releasing a lease, which run
// without the request's cancellation (a client that hung up must not strand
// the lease or lose the record its retry will ask for).
const completeTimeout = 5 * time.Second

// A Guard is the framework-neutral Idempotency-Key protocol: the net/http
// middleware and package echomw are thin layers over it, so a key used
// through one replays through the other. Adapters for other frameworks
// drive it the same way:
//
//	if !g.Applies(r) { run the handler; return }
//	call, p := g.Begin(r, principal)
//	switch {
//	case p != nil:        answer p (WriteProblem)
//	case call == nil:     run the handler (no key, not required)
//	case call.Replay(w):  done: the stored response was sent
//	default:
//		defer call.Abort()                                  // on panic
//		run the handler with call.Request() and call.Capture(w)
//		call.Finish()                                       // store, release
//	}
type Guard struct {
	cfg       IdempotencyConfig // defaults filled in
	principal func(*http.Request) (string, error)
}

// NewGuard validates cfg, fills its zero fields from
// DefaultIdempotencyConfig and returns its Guard. The error matches
// ErrInvalidConfig.
func NewGuard(cfg IdempotencyConfig) (*Guard, error) {
	d := DefaultIdempotencyConfig
	if nilness.IsNil(cfg.Store) { // (*MemoryStore)(nil) too: no panic in Err
		return nil, fmt.Errorf("%w: nil Store", ErrInvalidConfig)
	}
	if e, ok := cfg.Store.(interface{ Err() error }); ok && e.Err() != nil {
		return nil, e.Err()
	}
	if cfg.Principal == nil {
		cfg.Principal = d.Principal
	}
	if cfg.Methods == nil {
		cfg.Methods = d.Methods
	}
	cfg.Methods = slices.Clone(cfg.Methods)
	if cfg.MaxKeyLength == 0 {
		cfg.MaxKeyLength = d.MaxKeyLength
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = d.LeaseTTL
	}
	if cfg.RecordTTL == 0 {
		cfg.RecordTTL = d.RecordTTL
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = d.RetryAfter
	}
	if cfg.MaxRequestBody == 0 {
		cfg.MaxRequestBody = d.MaxRequestBody
	}
	if cfg.MaxResponseBody == 0 {
		cfg.MaxResponseBody = d.MaxResponseBody
	}
	if cfg.StoreHeaders == nil {
		cfg.StoreHeaders = d.StoreHeaders
	}
	if cfg.StoreStatus == nil {
		cfg.StoreStatus = d.StoreStatus
	}
	if cfg.Fingerprint == nil {
		cfg.Fingerprint = d.Fingerprint
	}
	switch {
	case cfg.MaxKeyLength < 0 || cfg.MaxKeyLength > maxKeyLength:
		return nil, fmt.Errorf("%w: MaxKeyLength %d (want 1 to %d)", ErrInvalidConfig, cfg.MaxKeyLength, maxKeyLength)
	case cfg.LeaseTTL < time.Millisecond:
		return nil, fmt.Errorf("%w: LeaseTTL %v", ErrInvalidConfig, cfg.LeaseTTL)
	case cfg.RecordTTL < time.Millisecond:
		return nil, fmt.Errorf("%w: RecordTTL %v", ErrInvalidConfig, cfg.RecordTTL)
	case cfg.WaitInFlight < 0 || cfg.RetryAfter < 0:
		return nil, fmt.Errorf("%w: WaitInFlight %v, RetryAfter %v", ErrInvalidConfig, cfg.WaitInFlight, cfg.RetryAfter)
	case cfg.MaxRequestBody < 0 || cfg.MaxResponseBody < 0:
		return nil, fmt.Errorf("%w: negative body limit", ErrInvalidConfig)
	case cfg.Scope != "" && !validScope(cfg.Scope):
		return nil, fmt.Errorf("%w: Scope %q: want 1 to %d bytes of [A-Za-z0-9._-]", ErrInvalidConfig, cfg.Scope, maxScopeLen)
	}
	allow := make([]string, 0, len(cfg.StoreHeaders))
	for _, h := range cfg.StoreHeaders {
		name := http.CanonicalHeaderKey(h)
		if neverStored[name] {
			return nil, fmt.Errorf("%w: StoreHeaders lists %s, which is never stored", ErrInvalidConfig, name)
		}
		allow = append(allow, name)
	}
	cfg.StoreHeaders = allow
	return &Guard{cfg: cfg, principal: cfg.Principal}, nil
}

// Applies reports whether the protocol applies to r: its method is one of
// Methods and the Skipper does not skip it.
func (g *Guard) Applies(r *http.Request) bool {
	if !slices.Contains(g.cfg.Methods, r.Method) {
		return false
	}
	return g.cfg.Skipper == nil || !g.cfg.Skipper(r)
}

// reject reports a problem answer as the request's last decision and
// returns it.
func (g *Guard) reject(ctx context.Context, rep *reporter, o Outcome, status int, code, detail string, err error) (*Call, *Problem) {
	rep.last(ctx, o, status, err)
	return nil, newProblem(status, code, detail, err)
}

// Begin runs the protocol's checks on r and decides. It returns a
// *Problem to answer; or a nil Call to run the handler unprotected (no key
// and none required); or a Call that either replays (Call.Replay) or owns
// the key (run the handler, then Call.Finish). principal identifies the
// caller; it is asked only when r carries a key (nil: the config's
// Principal). Begin reads r's body; Call.Request has it again.
//
// With an Observer, the observation starts once r is known to need a
// decision, and ends in Begin, unless the Call owns the key: then it ends
// in Finish or Abort.
func (g *Guard) Begin(r *http.Request, principal func(*http.Request) (string, error)) (*Call, *Problem) {
	key, ok, err := ParseKey(r.Header, g.cfg.MaxKeyLength)
	if err == nil && !ok && !g.cfg.Require {
		return nil, nil // no key, none required: nothing to decide
	}
	ctx, rep := startReport(r.Context(), g.cfg.Observer, g.cfg.OnDecision, KindIdempotency, g.cfg.Scope)
	if err != nil {
		return g.reject(ctx, &rep, OutcomeInvalid, http.StatusBadRequest, CodeKeyInvalid,
			"the Idempotency-Key header must be one string of 1 to "+itoa(g.cfg.MaxKeyLength)+" bytes", err)
	}
	if !ok {
		return g.reject(ctx, &rep, OutcomeInvalid, http.StatusBadRequest, CodeKeyMissing,
			"this request requires an Idempotency-Key header", ErrKeyMissing)
	}
	if principal == nil {
		principal = g.principal
	}
	who, err := principal(r)
	if err != nil || who == "" {
		if err == nil {
			err = errors.New("empty principal")
		}
		return g.reject(ctx, &rep, OutcomeInvalid, http.StatusUnauthorized, CodeUnauthenticated,
			"the caller could not be identified", fmt.Errorf("%w: %w", ErrUnauthenticated, err))
	}
	body, p := g.readBody(r)
	if p != nil {
		rep.last(ctx, OutcomeInvalid, p.Status, p.Err)
		return nil, p
	}
	fp := normFingerprint(g.cfg.Fingerprint(r, body))
	b, err := g.cfg.Store.Begin(ctx, BeginArgs{
		Key: scopedKey(who, key), Fingerprint: fp, LeaseTTL: g.cfg.LeaseTTL, Wait: g.cfg.WaitInFlight,
	})
	switch {
	case err != nil:
		if !errors.Is(err, ErrStoreUnavailable) && !errors.Is(err, ErrInvalidArgument) {
			err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		if g.cfg.FailOpen {
			rep.last(ctx, OutcomeStoreError, 0, err)
			return &Call{g: g, req: withBody(r, r.Context(), body)}, nil
		}
		return g.reject(ctx, &rep, OutcomeStoreError, http.StatusServiceUnavailable, CodeStoreUnavailable,
			"idempotency store unavailable; retry with the same Idempotency-Key", err)
	case b.Record != nil:
		if b.Record.Fingerprint != fp {
			return g.reject(ctx, &rep, OutcomeMismatch, http.StatusUnprocessableEntity, CodeKeyReused,
				"this Idempotency-Key was used for a different request", ErrKeyReused)
		}
		rep.last(ctx, OutcomeReplayed, 0, nil)
		return &Call{g: g, rec: b.Record}, nil
	case b.InFlight != nil:
		if b.InFlight.Fingerprint != fp {
			return g.reject(ctx, &rep, OutcomeMismatch, http.StatusUnprocessableEntity, CodeKeyReused,
				"this Idempotency-Key is in use for a different request", ErrKeyReused)
		}
		c, p := g.reject(ctx, &rep, OutcomeInFlight, http.StatusConflict, CodeInFlight,
			"a request with this Idempotency-Key is being processed; retry later with the same key", ErrInFlight)
		p.RetryAfter = g.cfg.RetryAfter
		return c, p
	case b.Lease == nil:
		return g.reject(ctx, &rep, OutcomeStoreError, http.StatusServiceUnavailable, CodeStoreUnavailable,
			"idempotency store unavailable", fmt.Errorf("%w: empty Begin result", ErrStoreUnavailable))
	}
	rep.decided(ctx, OutcomeFirst, 0, nil)
	runCtx, cancel := context.WithCancelCause(ctx)
	c := &Call{g: g, lease: b.Lease, fp: fp, req: withBody(r, runCtx, body), cancel: cancel, done: make(chan struct{}), rep: rep}
	go c.watch()
	return c, nil
}

// readBody reads r's body up to the limit.
func (g *Guard) readBody(r *http.Request) ([]byte, *Problem) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := g.cfg.MaxRequestBody
	tooLarge := func() ([]byte, *Problem) {
		return nil, newProblem(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"the request body is over "+itoa64(limit)+" bytes", ErrBodyTooLarge)
	}
	if r.ContentLength > limit {
		return tooLarge()
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + 1)
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLarge()
	case err != nil:
		return nil, newProblem(http.StatusBadRequest, CodeBadRequest, "the request body could not be read",
			fmt.Errorf("%w: reading body: %w", ErrBadRequest, err))
	case int64(buf.Len()) > limit:
		return tooLarge()
	}
	return buf.Bytes(), nil
}

// withBody returns r with ctx and the body that was read put back.
func withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	r2 := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		r2.Body = readCloser{bytes.NewReader(body), r.Body}
	}
	return r2
}

type readCloser struct {
	*bytes.Reader
	orig io.Closer
}

func (rc readCloser) Close() error { return rc.orig.Close() }
