package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// DailyConfig configures Daily, NewDailyGuard and NewGate. Store, Scope
// and (for Daily) Subject are required; zero fields take the defaults
// documented on them.
type DailyConfig struct {
	// Skipper returns true for requests passed through untouched. nil: none.
	Skipper func(r *http.Request) bool

	// Store keeps the claims. Required: nil, or a nil *RedisStore,
	// *MemoryStore or *SQLStore, is ErrInvalidConfig. Mode ModeCount and Counted need a
	// ClaimCounter.
	Store ClaimStore

	// Scope names what is limited ("vote", "checkin", "read"): 1 to 64
	// bytes of UTF-8 without control characters. Required.
	Scope string

	// Location is the time zone whose calendar days are counted. nil: UTC
	// (never time.Local).
	Location *time.Location

	// LocationFor, if set, returns the time zone of a request's subject (a
	// user's own zone); nil results fall back to Location, errors answer 400.
	LocationFor func(r *http.Request) (*time.Location, error)

	// Subject returns who is acting (a user or device ID). An error or an
	// empty string answers 401: such requests never share a bucket.
	// Required by Daily (a DailyGuard may get it per request instead).
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
	// atomic script), so Gate.Count and ClaimCounter.Count answer. Gate
	// mode only.
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
	ProblemWriter ProblemWriter

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
// package doc. Like Echo's middleware constructors it panics, at start-up,
// if cfg is invalid (a nil Subject, say; the message matches
// ErrInvalidConfig); use cfg.ToMiddleware to get the error instead.
func Daily(cfg DailyConfig) func(http.Handler) http.Handler {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching ErrInvalidConfig. It never panics.
func (cfg DailyConfig) ToMiddleware() (func(http.Handler) http.Handler, error) {
	if cfg.Subject == nil {
		return nil, fmt.Errorf("%w: nil Subject", ErrInvalidConfig)
	}
	g, err := NewDailyGuard(cfg)
	if err != nil {
		return nil, err
	}
	write := problemWriter(cfg.ProblemWriter)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serve(w, next, g.Begin(r, DailyExtractors{}), write, cfg.DuplicateHandler)
		})
	}, nil
}

// DailyExtractors identify one request for DailyGuard.Begin. A nil field
// uses the config's Subject, Object or LocationFor. Adapters for other
// frameworks set them to closures over their own request context.
type DailyExtractors struct {
	Subject  func(r *http.Request) (string, error)
	Object   func(r *http.Request) (string, error)
	Location func(r *http.Request) (*time.Location, error)
}

// A DailyGuard is the framework-neutral once-per-day protocol of Daily, on
// a Gate: the net/http middleware Daily and package echomw are thin layers
// over it. Adapters drive its Begin as the Call doc shows. It is safe for
// concurrent use.
type DailyGuard struct {
	cfg DailyConfig
	g   *Gate
}

// NewDailyGuard validates cfg (as NewGate, without requiring Subject) and
// returns its guard. The error matches ErrInvalidConfig.
func NewDailyGuard(cfg DailyConfig) (*DailyGuard, error) {
	g, err := NewGate(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ReleaseOn == nil {
		cfg.ReleaseOn = DefaultReleaseOn
	}
	return &DailyGuard{cfg: cfg, g: g}, nil
}

// start starts observing a request's decisions.
func (d *DailyGuard) start(ctx context.Context) (context.Context, reporter) {
	return startReport(ctx, d.cfg.Observer, d.cfg.OnDecision, KindDaily, d.cfg.Scope)
}

// who extracts subject, object and location, or the problem to answer.
func (d *DailyGuard) who(r *http.Request, ex DailyExtractors) (subject, object string, loc *time.Location, p *Problem) {
	if ex.Subject == nil {
		ex.Subject = d.cfg.Subject
	}
	if ex.Subject == nil {
		panic("httpidem: DailyGuard.Begin: no Subject in the config or the extractors")
	}
	if ex.Object == nil {
		ex.Object = d.cfg.Object
	}
	if ex.Location == nil {
		ex.Location = d.cfg.LocationFor
	}
	subject, err := ex.Subject(r)
	if err != nil || subject == "" {
		if err == nil {
			err = errors.New("empty subject")
		}
		return "", "", nil, newProblem(http.StatusUnauthorized, CodeUnauthenticated,
			"the caller could not be identified", fmt.Errorf("%w: %w", ErrUnauthenticated, err))
	}
	if ex.Object != nil {
		if object, err = ex.Object(r); err != nil {
			return "", "", nil, invalidRequest("the request does not name a valid object", fmt.Errorf("object: %w", err))
		}
	}
	if ex.Location != nil {
		if loc, err = ex.Location(r); err != nil {
			return "", "", nil, invalidRequest("the request's time zone is invalid", fmt.Errorf("location: %w", err))
		}
	}
	return subject, object, loc, nil
}

// invalidRequest is a 400 for err.
func invalidRequest(detail string, err error) *Problem {
	return newProblem(http.StatusBadRequest, CodeInvalidRequest, detail, fmt.Errorf("%w: %w", ErrInvalidRequest, err))
}

// Begin decides r: ActionPass when the Skipper skips it, or when the store
// failed and FailOpen is set; ActionAnswer with the problem (400, 401,
// 503); ActionDuplicate for the subject's later requests of the day; or
// ActionRun — a first claim (Gate mode; Finish keeps it or gives it back),
// or any identified request in Count mode (Finish counts a 2xx answer).
// Call.Request carries the Ticket of a gated request (TicketFromContext).
func (d *DailyGuard) Begin(r *http.Request, ex DailyExtractors) *Call {
	if d.cfg.Skipper != nil && d.cfg.Skipper(r) {
		return pass(r)
	}
	subject, object, loc, p := d.who(r, ex)
	if p != nil {
		ctx, rep := d.start(r.Context())
		rep.last(ctx, rejected(p), p.Status, p.Err)
		return answer(r, p)
	}
	if d.cfg.Mode == ModeCount {
		return &Call{action: ActionRun, req: r, run: &counting{d: d, ctx: r.Context(), subject: subject, object: object, loc: loc}}
	}
	ctx, rep := d.start(r.Context())
	t, err := d.g.Take(ctx, subject, object, loc)
	if err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			p := invalidRequest("the request's subject or object is invalid", err)
			rep.last(ctx, OutcomeInvalid, p.Status, p.Err)
			return answer(r, p)
		}
		if d.cfg.FailOpen {
			rep.last(ctx, OutcomeStoreError, 0, err)
			return pass(r)
		}
		p := newProblem(http.StatusServiceUnavailable, CodeUnavailable, "claim store unavailable", err)
		rep.last(ctx, OutcomeStoreError, p.Status, p.Err)
		return answer(r, p)
	}
	r = r.WithContext(NewTicketContext(ctx, t))
	if !t.First {
		p := newProblem(http.StatusConflict, CodeAlreadyClaimed,
			"already done today; try again after local midnight", ErrAlreadyClaimed)
		p.RetryAfter = t.RetryAfter
		rep.last(ctx, OutcomeDuplicate, p.Status, nil)
		return &Call{action: ActionDuplicate, req: r, problem: p}
	}
	rep.decided(ctx, OutcomeFirst, 0, nil)
	return &Call{action: ActionRun, req: r, run: &claimed{d: d, ctx: ctx, t: t, rep: rep}}
}

// noted notes the status of the response a handler sends.
type noted struct{ sw *statusWriter }

func (n *noted) writer(w http.ResponseWriter) http.ResponseWriter {
	n.sw = &statusWriter{ResponseWriter: w}
	return n.sw
}

// status is given, or else what went out (200 if nothing did).
func (n *noted) status(given int) int {
	switch {
	case given != 0:
		return given
	case n.sw != nil:
		return n.sw.code()
	}
	return http.StatusOK
}

// claimed runs a gated request that holds today's first claim.
type claimed struct {
	noted
	d   *DailyGuard
	ctx context.Context
	t   *Ticket
	rep reporter
}

// finish keeps the claim, or gives it back when the handler failed.
func (c *claimed) finish(status int) *Problem {
	if c.d.cfg.ReleaseOn(c.status(status)) {
		c.abort()
		return nil
	}
	c.rep.close(OutcomeFirst, 0, nil) // kept, as decided
	return nil
}

// abort gives the claim back (a panic, or a failure).
func (c *claimed) abort() {
	err := c.t.Release(c.ctx)
	c.rep.last(c.ctx, OutcomeReleased, 0, err)
}

// counting runs a Count-mode request: its claim is taken after a 2xx
// answer, and only that claim is observed.
type counting struct {
	noted
	d               *DailyGuard
	ctx             context.Context
	subject, object string
	loc             *time.Location
}

func (c *counting) finish(status int) *Problem {
	if s := c.status(status); s < 200 || s >= 300 {
		return nil
	}
	ctx, cancel := finishContext(c.ctx)
	defer cancel()
	ctx, rep := c.d.start(ctx)
	t, err := c.d.g.Take(ctx, c.subject, c.object, c.loc)
	switch {
	case err != nil:
		rep.last(ctx, OutcomeStoreError, 0, err)
	case t.First:
		rep.last(ctx, OutcomeFirst, 0, nil)
	default:
		rep.last(ctx, OutcomeDuplicate, 0, nil)
	}
	return nil
}

func (c *counting) abort() {}
