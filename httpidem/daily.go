package httpidem

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DailyConfig configures Daily and NewGate. Store, Scope and (for Daily)
// Subject are required; zero fields take the defaults documented on them.
type DailyConfig struct {
	// Skipper returns true for requests passed through untouched. nil: none.
	Skipper func(r *http.Request) bool

	// Store keeps the claims. Required: nil, or a nil *RedisStore or
	// *MemoryStore, is ErrInvalidConfig.
	Store Store

	// Scope names what is limited ("vote", "checkin", "read"): 1 to 64
	// bytes of [A-Za-z0-9._-]. Required.
	Scope string

	// Location is the time zone whose calendar days are counted. nil: UTC
	// (never time.Local).
	Location *time.Location

	// LocationFor, if set, returns the time zone of a request's subject (a
	// user's own zone); nil results fall back to Location, errors answer 400.
	LocationFor func(r *http.Request) (*time.Location, error)

	// Subject returns who is acting (a user or device ID). An error or an
	// empty string answers 401: such requests never share a bucket.
	// Required by Daily.
	Subject func(r *http.Request) (string, error)

	// Object returns what is acted on (an item ID). An error answers 400.
	// nil: "" (one claim per subject per day, as for a check-in).
	Object func(r *http.Request) (string, error)

	// Mode is ModeGate (the zero value) or ModeCount.
	Mode DailyMode

	// Approximate makes Count mode use a HyperLogLog (12 KB per object and
	// day, about 0.81% error) instead of a claim per subject and an exact
	// counter. Count mode only.
	Approximate bool

	// Counted makes Gate mode also count first claims exactly (in the same
	// atomic script), so Gate.Count and Store.Count answer. Gate mode only.
	Counted bool

	// Grace is how long a claim is kept past the end of its day. 0:
	// DefaultGrace (1h).
	Grace time.Duration

	// Clock returns the current time, which decides the day and its end.
	// nil: time.Now. The store expires claims by its own clock (Redis: the
	// server's), so an injected Clock far from it is for tests: pair it
	// with miniredis SetTime, or MemoryStore's WithClock.
	Clock func() time.Time

	// ReleaseOn reports whether a gated request whose handler answered
	// status failed, so its claim is given back and the subject may try
	// again today. A panicking handler always releases. nil: status >= 500.
	ReleaseOn func(status int) bool

	// DuplicateHandler answers a gated subject's later requests of the day
	// (for example 200 "already checked in"); TicketFromContext gives it
	// the day and Until. nil: 409 with Retry-After until the next local
	// midnight and code "already_claimed".
	DuplicateHandler http.Handler

	// FailOpen passes requests through when the store fails. false: 503.
	FailOpen bool

	// ProblemWriter writes error answers. nil: WriteProblem.
	ProblemWriter func(w http.ResponseWriter, r *http.Request, p *Problem)

	// OnDecision, if set, is called with every decision (see Decision).
	OnDecision func(ctx context.Context, d Decision)

	// Observer, if set, traces and measures the decisions of Daily (see
	// Observer; package otel's Instrumentation is one). A Gate does not
	// use it. nil: none.
	Observer Observer
}

// DefaultDailyConfig holds the defaults of DailyConfig.
var DefaultDailyConfig = DailyConfig{
	Location:  time.UTC,
	Grace:     DefaultGrace,
	Clock:     time.Now,
	ReleaseOn: DefaultReleaseOn,
}

// DefaultReleaseOn releases the claim of a request answered with a 5xx.
func DefaultReleaseOn(status int) bool { return status >= 500 }

// Daily returns net/http middleware that lets a subject through once per
// object per local day (Gate mode) or counts it once (Count mode); see the
// package doc. It never panics: if cfg is invalid, the middleware answers
// every request with 500 and code "misconfigured" — call cfg.ToMiddleware
// at start-up to get the error instead.
func Daily(cfg DailyConfig) func(http.Handler) http.Handler {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		return misconfigured(err, cfg.ProblemWriter)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching ErrInvalidConfig.
func (cfg DailyConfig) ToMiddleware() (func(http.Handler) http.Handler, error) {
	g, err := NewGate(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Subject == nil {
		return nil, fmt.Errorf("%w: nil Subject", ErrInvalidConfig)
	}
	if cfg.ReleaseOn == nil {
		cfg.ReleaseOn = DefaultReleaseOn
	}
	d := &daily{cfg: cfg, g: g}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.serve(w, r, next) })
	}, nil
}

type daily struct {
	cfg DailyConfig
	g   *Gate
}

// start starts observing a request's decisions.
func (d *daily) start(ctx context.Context) (context.Context, reporter) {
	return startReport(ctx, d.cfg.Observer, d.cfg.OnDecision, KindDaily, d.cfg.Scope)
}

// problem answers p, reported as the request's last decision.
func (d *daily) problem(ctx context.Context, rep *reporter, w http.ResponseWriter, r *http.Request, p *Problem, o Outcome) {
	rep.last(ctx, o, p.Status, p.Err)
	if d.cfg.ProblemWriter != nil {
		d.cfg.ProblemWriter(w, r, p)
		return
	}
	WriteProblem(w, p)
}

// who extracts subject, object and location, or the problem to answer.
func (d *daily) who(r *http.Request) (subject, object string, loc *time.Location, p *Problem) {
	subject, err := d.cfg.Subject(r)
	if err != nil || subject == "" {
		if err == nil {
			err = errors.New("empty subject")
		}
		return "", "", nil, newProblem(http.StatusUnauthorized, CodeUnauthenticated,
			"the caller could not be identified", fmt.Errorf("%w: %w", ErrUnauthenticated, err))
	}
	if d.cfg.Object != nil {
		if object, err = d.cfg.Object(r); err != nil {
			return "", "", nil, newProblem(http.StatusBadRequest, CodeBadRequest,
				"the request does not name a valid object", fmt.Errorf("%w: object: %w", ErrBadRequest, err))
		}
	}
	if d.cfg.LocationFor != nil {
		if loc, err = d.cfg.LocationFor(r); err != nil {
			return "", "", nil, newProblem(http.StatusBadRequest, CodeBadRequest,
				"the request's time zone is invalid", fmt.Errorf("%w: location: %w", ErrBadRequest, err))
		}
	}
	return subject, object, loc, nil
}

// storeProblem is the answer to a failed Take.
func storeProblem(err error) *Problem {
	if errors.Is(err, ErrInvalidArgument) {
		return newProblem(http.StatusBadRequest, CodeBadRequest, "the request's subject or object is invalid",
			fmt.Errorf("%w: %w", ErrBadRequest, err))
	}
	return newProblem(http.StatusServiceUnavailable, CodeStoreUnavailable, "claim store unavailable", err)
}

func (d *daily) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if d.cfg.Skipper != nil && d.cfg.Skipper(r) {
		next.ServeHTTP(w, r)
		return
	}
	subject, object, loc, p := d.who(r)
	if p != nil {
		ctx, rep := d.start(r.Context())
		d.problem(ctx, &rep, w, r, p, OutcomeInvalid)
		return
	}
	if d.cfg.Mode == ModeCount {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.code() >= 200 && sw.code() < 300 {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), completeTimeout)
			defer cancel()
			d.counted(cctx, subject, object, loc)
		}
		return
	}
	ctx, rep := d.start(r.Context())
	t, err := d.g.Take(ctx, subject, object, loc)
	if err != nil {
		if d.cfg.FailOpen && !errors.Is(err, ErrInvalidArgument) {
			rep.last(ctx, OutcomeStoreError, 0, err)
			next.ServeHTTP(w, r)
			return
		}
		p := storeProblem(err)
		o := OutcomeStoreError
		if p.Status == http.StatusBadRequest {
			o = OutcomeInvalid
		}
		d.problem(ctx, &rep, w, r, p, o)
		return
	}
	r = r.WithContext(NewTicketContext(ctx, t))
	if !t.First {
		if d.cfg.DuplicateHandler != nil {
			rep.last(ctx, OutcomeDuplicate, 0, nil)
			d.cfg.DuplicateHandler.ServeHTTP(w, r)
			return
		}
		p := newProblem(http.StatusConflict, CodeAlreadyClaimed,
			"already done today; try again after local midnight", ErrAlreadyClaimed)
		p.RetryAfter = t.RetryAfter
		d.problem(ctx, &rep, w, r, p, OutcomeDuplicate)
		return
	}
	rep.decided(ctx, OutcomeFirst, 0, nil)
	sw := &statusWriter{ResponseWriter: w}
	ok := false
	defer func() {
		if !ok || d.cfg.ReleaseOn(sw.code()) { // a panic, or a failure
			err := t.Release(ctx)
			rep.last(ctx, OutcomeReleased, 0, err)
			return
		}
		rep.close(OutcomeFirst, 0, nil) // kept, as decided
	}()
	next.ServeHTTP(sw, r)
	ok = true
}

// counted takes a Count-mode claim after a successful answer.
func (d *daily) counted(ctx context.Context, subject, object string, loc *time.Location) {
	ctx, rep := d.start(ctx)
	t, err := d.g.Take(ctx, subject, object, loc)
	switch {
	case err != nil:
		rep.last(ctx, OutcomeStoreError, 0, err)
	case t.First:
		rep.last(ctx, OutcomeFirst, 0, nil)
	default:
		rep.last(ctx, OutcomeDuplicate, 0, nil)
	}
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && (code < 100 || code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

func (s *statusWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
