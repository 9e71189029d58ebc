package httpidem

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nilness"
)

// DefaultGrace is how long a claim outlives its day when DailyConfig.Grace
// is zero: clock skew between nodes and Redis never frees a claim early.
const DefaultGrace = time.Hour

// A DailyMode says what Daily does with a subject's repeated requests.
type DailyMode uint8

// The daily modes.
const (
	// ModeGate lets a subject through once per object per local day; later
	// requests that day get 409 (or the DuplicateHandler).
	ModeGate DailyMode = iota
	// ModeCount never blocks: it counts each subject once per object per day
	// (after a 2xx answer), exactly or, with Approximate, in a HyperLogLog.
	ModeCount
)

// A Gate is the once-per-day claim without HTTP, for jobs and RPC: the
// first Claim of a subject on an object in a local day returns true, later
// ones that day false. Daily middleware is built on it. It is safe for
// concurrent use.
type Gate struct {
	store ClaimStore
	scope string
	loc   *time.Location
	grace time.Duration
	now   func() time.Time
	count CountMode
}

// NewGate returns the Gate of cfg; it uses Store, Scope, Location, Mode,
// Approximate, Counted, Grace and Clock and ignores the HTTP fields. The
// error matches ErrInvalidConfig.
func NewGate(cfg DailyConfig) (*Gate, error) {
	g := &Gate{store: cfg.Store, scope: cfg.Scope, loc: cfg.Location, grace: cfg.Grace, now: cfg.Clock}
	switch {
	case nilness.IsNil(cfg.Store): // (*RedisStore)(nil) too
		return nil, fmt.Errorf("%w: nil Store", ErrInvalidConfig)
	case name.Check(cfg.Scope, maxScopeLen) != "":
		return nil, fmt.Errorf("%w: Scope %q: %s", ErrInvalidConfig, cfg.Scope, name.Check(cfg.Scope, maxScopeLen))
	case cfg.Grace < 0:
		return nil, fmt.Errorf("%w: negative Grace", ErrInvalidConfig)
	case cfg.Mode > ModeCount:
		return nil, fmt.Errorf("%w: Mode %d", ErrInvalidConfig, cfg.Mode)
	case cfg.Approximate && cfg.Mode != ModeCount:
		return nil, fmt.Errorf("%w: Approximate needs ModeCount", ErrInvalidConfig)
	case cfg.Counted && cfg.Mode != ModeGate:
		return nil, fmt.Errorf("%w: Counted is for ModeGate (ModeCount always counts)", ErrInvalidConfig)
	}
	if _, ok := cfg.Store.(ClaimCounter); !ok && (cfg.Mode == ModeCount || cfg.Counted) {
		return nil, fmt.Errorf("%w: ModeCount and Counted need a Store that is a ClaimCounter", ErrInvalidConfig)
	}
	if g.loc == nil {
		g.loc = time.UTC
	}
	if g.grace == 0 {
		g.grace = DefaultGrace
	}
	if g.now == nil {
		g.now = time.Now
	}
	switch {
	case cfg.Mode == ModeCount && cfg.Approximate:
		g.count = CountApprox
	case cfg.Mode == ModeCount || cfg.Counted:
		g.count = CountExact
	}
	return g, nil
}

// A Ticket is the result of Gate.Take.
type Ticket struct {
	First      bool          // the subject's first claim on the object today
	Subject    string        // who claimed
	Day        Day           // the local day claimed
	Until      time.Time     // when that day ends: the next local midnight
	RetryAfter time.Duration // from the Take to Until

	g    *Gate
	args ClaimArgs
}

// Release gives a first claim back (compare and delete: a claim taken
// since by someone else is untouched) and uncounts it, so the subject can
// claim again today. It does nothing for a duplicate or an approximate
// count. It runs even when ctx is cancelled, with a short timeout.
func (t *Ticket) Release(ctx context.Context) error {
	if !t.First || t.args.Count == CountApprox {
		return nil
	}
	ctx, cancel := finishContext(ctx)
	defer cancel()
	return t.g.store.Unclaim(ctx, t.args)
}

// Take claims object for subject on the current day in loc (nil: the
// Gate's Location) — a single atomic store operation — and returns the
// Ticket. Errors are store failures (matching ErrUnavailable) or
// invalid arguments (ErrInvalidArgument), never a duplicate: a duplicate
// is a Ticket whose First is false.
func (g *Gate) Take(ctx context.Context, subject, object string, loc *time.Location) (*Ticket, error) {
	if loc == nil {
		loc = g.loc
	}
	now := g.now()
	day := DayOf(now, loc)
	until := day.End(loc)
	t := &Ticket{Subject: subject, Day: day, Until: until, RetryAfter: until.Sub(now), g: g}
	t.args = ClaimArgs{
		Scope: g.scope, Object: object, Subject: subject, Day: day,
		ExpireAt: until.Add(g.grace), Count: g.count,
	}
	if g.count != CountApprox {
		t.args.Token = rand.Text()
	}
	first, err := g.store.Claim(ctx, t.args)
	if err != nil {
		return nil, err
	}
	t.First = first
	return t, nil
}

// Claim reports whether this is subject's first claim on object today in
// the Gate's Location. In Count mode it counts instead (see ClaimCounter).
func (g *Gate) Claim(ctx context.Context, subject, object string) (first bool, err error) {
	t, err := g.Take(ctx, subject, object, nil)
	if err != nil {
		return false, err
	}
	return t.First, nil
}

// Count returns how many subjects claimed object on day: exact in Count
// mode and with Counted, a HyperLogLog estimate (about 0.81% standard
// error) with Approximate, and 0 for an uncounted Gate.
func (g *Gate) Count(ctx context.Context, object string, day Day) (int64, error) {
	c, ok := g.store.(ClaimCounter)
	if !ok {
		return 0, nil
	}
	return c.Count(ctx, g.scope, object, day)
}

// Today returns the current day in the Gate's Location, by its Clock.
func (g *Gate) Today() Day { return DayOf(g.now(), g.loc) }

// ticketKey is the context key of a Ticket.
type ticketKey struct{}

// NewTicketContext returns ctx carrying t. Daily puts the Ticket of a
// gated request in the context the handler (and the DuplicateHandler) see.
func NewTicketContext(ctx context.Context, t *Ticket) context.Context {
	return context.WithValue(ctx, ticketKey{}, t)
}

// TicketFromContext returns the Ticket ctx carries, if any.
func TicketFromContext(ctx context.Context) (*Ticket, bool) {
	t, ok := ctx.Value(ticketKey{}).(*Ticket)
	return t, ok
}
