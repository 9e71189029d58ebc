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

	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nilness"
)

// completeTimeout bounds storing a record and releasing a lease, which run
// without the request's cancellation (a client that hung up must not strand
// the lease or lose the record its retry will ask for).
const completeTimeout = 5 * time.Second

// An IdempotencyGuard is the framework-neutral Idempotency-Key protocol:
// the net/http middleware Idempotency and package echomw are thin layers
// over it, so a key used through one replays through the other, and a fix
// lands once. Adapters for other frameworks drive its Begin as the Call
// doc shows. It is safe for concurrent use.
type IdempotencyGuard struct {
	cfg              IdempotencyConfig // defaults filled in
	defaultPrincipal bool              // cfg.Principal was nil: AuthorizationPrincipal
}

// NewIdempotencyGuard validates cfg, fills its zero fields from
// DefaultIdempotencyConfig and returns its guard. The error matches
// ErrInvalidConfig. The Skipper, Principal and Observer of cfg apply to
// every Begin.
func NewIdempotencyGuard(cfg IdempotencyConfig) (*IdempotencyGuard, error) {
	d := DefaultIdempotencyConfig
	if nilness.IsNil(cfg.Store) { // (*MemoryStore)(nil) too
		return nil, fmt.Errorf("%w: nil Store", ErrInvalidConfig)
	}
	g := &IdempotencyGuard{defaultPrincipal: cfg.Principal == nil}
	if cfg.Principal == nil {
		cfg.Principal = d.Principal
	}
	if cfg.Methods == nil {
		cfg.Methods = d.Methods
	}
	cfg.Methods = slices.Clone(cfg.Methods)
	fillDefaults(&cfg.MaxKeyLength, d.MaxKeyLength)
	fillDefaults(&cfg.LeaseTTL, d.LeaseTTL)
	fillDefaults(&cfg.RecordTTL, d.RecordTTL)
	fillDefaults(&cfg.RetryAfter, d.RetryAfter)
	fillDefaults(&cfg.MaxRequestBody, d.MaxRequestBody)
	fillDefaults(&cfg.MaxResponseBody, d.MaxResponseBody)
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
	case cfg.Scope != "" && name.Check(cfg.Scope, maxScopeLen) != "":
		return nil, fmt.Errorf("%w: Scope %q: %s", ErrInvalidConfig, cfg.Scope, name.Check(cfg.Scope, maxScopeLen))
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
	g.cfg = cfg
	return g, nil
}

// fillDefaults sets *v to d when it is zero.
func fillDefaults[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Begin decides r: ActionPass when the guard does not apply (Skipper,
// Methods, or no key where none is required) or when the store failed and
// FailOpen is set; ActionAnswer with the problem (400, 401, 409, 413, 422,
// 503); ActionReplay with the stored response; or ActionRun when the
// request owns its key. principal identifies the caller (nil: the config's
// Principal); it is asked only when r carries a key. Begin reads r's body;
// Call.Request has it again.
//
// With an Observer, the observation starts once r is known to need a
// decision, and ends in Begin, unless the request runs: then it ends in
// Call.Finish or Call.Abort.
func (g *IdempotencyGuard) Begin(r *http.Request, principal func(*http.Request) (string, error)) *Call {
	if !slices.Contains(g.cfg.Methods, r.Method) || (g.cfg.Skipper != nil && g.cfg.Skipper(r)) {
		return pass(r)
	}
	key, ok, err := ParseKey(r.Header, g.cfg.MaxKeyLength)
	if err == nil && !ok && !g.cfg.Require {
		return pass(r) // no key, none required: nothing to decide
	}
	ctx, rep := startReport(r.Context(), g.cfg.Observer, g.cfg.OnDecision, KindIdempotency, g.cfg.Scope)
	reject := func(o Outcome, p *Problem) *Call {
		rep.last(ctx, o, p.Status, p.Err)
		return answer(r, p)
	}
	if err != nil {
		return reject(OutcomeInvalid, newProblem(http.StatusBadRequest, CodeInvalidKey,
			"the Idempotency-Key header must be one string of 1 to "+itoa(g.cfg.MaxKeyLength)+" bytes", err))
	}
	if !ok {
		return reject(OutcomeInvalid, newProblem(http.StatusBadRequest, CodeKeyMissing,
			"this request requires an Idempotency-Key header", ErrKeyMissing))
	}
	who, p := g.identify(r, principal)
	if p != nil {
		return reject(rejected(p), p)
	}
	body, p := g.readBody(r)
	if p != nil {
		return reject(OutcomeInvalid, p)
	}
	fp := normFingerprint(g.cfg.Fingerprint(r, body))
	b, err := g.cfg.Store.Begin(ctx, BeginArgs{
		Key: scopedKey(who, key), Fingerprint: fp, LeaseTTL: g.cfg.LeaseTTL, Wait: g.cfg.WaitInFlight,
	})
	switch {
	case err != nil:
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrInvalidArgument) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if g.cfg.FailOpen {
			rep.last(ctx, OutcomeStoreError, 0, err)
			return pass(withBody(r, r.Context(), body))
		}
		return reject(OutcomeStoreError, newProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"idempotency store unavailable; retry with the same Idempotency-Key", err))
	case b.Record != nil:
		if b.Record.Fingerprint != fp {
			return reject(OutcomeMismatch, newProblem(http.StatusUnprocessableEntity, CodeKeyReused,
				"this Idempotency-Key was used for a different request", ErrKeyReused))
		}
		rep.last(ctx, OutcomeReplayed, 0, nil)
		return &Call{action: ActionReplay, req: r, rec: b.Record}
	case b.InFlight != nil:
		if b.InFlight.Fingerprint != fp {
			return reject(OutcomeMismatch, newProblem(http.StatusUnprocessableEntity, CodeKeyReused,
				"this Idempotency-Key is in use for a different request", ErrKeyReused))
		}
		p := newProblem(http.StatusConflict, CodeInFlight,
			"a request with this Idempotency-Key is being processed; retry later with the same key", ErrInFlight)
		p.RetryAfter = g.cfg.RetryAfter
		return reject(OutcomeInFlight, p)
	case b.Lease == nil:
		return reject(OutcomeStoreError, newProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"idempotency store unavailable", fmt.Errorf("%w: empty Begin result", ErrUnavailable)))
	}
	o := &owner{g: g, lease: b.Lease, fp: fp, done: make(chan struct{}), rep: rep}
	if tl, ok := b.Lease.(txLease); ok {
		// The transaction lives until the commit, past the request's own
		// cancellation, unless the lease is lost (watch).
		txCtx, txCancel := context.WithCancelCause(context.WithoutCancel(ctx))
		tx, err := tl.beginTx(txCtx)
		if err != nil {
			txCancel(nil)
			rctx, cancel := finishContext(ctx)
			_ = b.Lease.Release(rctx)
			cancel()
			if g.cfg.FailOpen {
				rep.last(ctx, OutcomeStoreError, 0, err)
				return pass(withBody(r, r.Context(), body))
			}
			return reject(OutcomeStoreError, newProblem(http.StatusServiceUnavailable, CodeUnavailable,
				"idempotency store unavailable; retry with the same Idempotency-Key", err))
		}
		o.txl, o.tx, o.txCancel = tl, tx, txCancel
		ctx = context.WithValue(ctx, txKey{}, tx)
	}
	rep.decided(ctx, OutcomeFirst, 0, nil)
	o.client = r.Context()
	o.ctx, o.cancel = context.WithCancelCause(ctx)
	o.req = withBody(r, o.ctx, body)
	go o.watch()
	return &Call{action: ActionRun, req: o.req, run: o}
}

// identify returns the principal of r, or the 401 of a request whose
// principal is unknown; with the default Principal, the detail says how
// to change it.
func (g *IdempotencyGuard) identify(r *http.Request, principal func(*http.Request) (string, error)) (string, *Problem) {
	extract := principal
	if extract == nil {
		extract = g.cfg.Principal
	}
	who, err := extract(r)
	if err == nil && who == "" {
		err = errors.New("empty principal")
	}
	if err == nil {
		return who, nil
	}
	detail := "the caller could not be identified"
	if principal == nil && g.defaultPrincipal {
		detail = "the caller could not be identified: the default Principal of the idempotency " +
			"middleware hashes the Authorization header, and this request has none " +
			"(set the middleware's Principal to identify callers another way)"
	}
	return "", newProblem(http.StatusUnauthorized, CodeUnauthenticated, detail, fmt.Errorf("%w: %w", ErrUnauthenticated, err))
}

// readBody reads r's body up to the limit.
func (g *IdempotencyGuard) readBody(r *http.Request) ([]byte, *Problem) {
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
		return nil, newProblem(http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read",
			fmt.Errorf("%w: reading body: %w", ErrInvalidRequest, err))
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
