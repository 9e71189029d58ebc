package cronlock

import (
	"fmt"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nodeid"
	"github.com/robfig/cron/v3"
)

// Defaults used when no option says otherwise.
const (
	// DefaultLeaseTTL is the TTL of the running lease (WithLeaseTTL). The
	// watchdog renews it every third of that while the job runs; a node
	// that dies mid-run blocks the job for at most this long.
	DefaultLeaseTTL = core.DefaultTTL
	// MaxNameLen is the longest job name accepted, in bytes.
	MaxNameLen = 200
	// MaxNodeIDLen is the longest node ID accepted, in bytes.
	MaxNodeIDLen = 200
)

// opTimeout bounds each Redis operation a tick makes (claim, records,
// running lease without waiting). A Redis that does not answer within it
// counts as unreachable.
const opTimeout = 5 * time.Second

// An Option configures a Locker. Options are sealed: only this package
// makes them.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Overlap says what a tick does when the previous run of its job still
// holds the running lease.
type Overlap int

const (
	// OverlapSkip skips the tick and logs it at Info (the default), like
	// cron.SkipIfStillRunning but across the fleet.
	OverlapSkip Overlap = iota
	// OverlapWait waits for the previous run to finish, at most until the
	// job's next planned fire time; a tick still waiting then is skipped
	// and logged. Like cron.DelayIfStillRunning, but bounded and across
	// the fleet.
	OverlapWait
)

// String returns "skip", "wait", or "Overlap(n)" for an unknown value.
func (o Overlap) String() string {
	switch o {
	case OverlapSkip:
		return "skip"
	case OverlapWait:
		return "wait"
	}
	return "Overlap(" + strconv.Itoa(int(o)) + ")"
}

// standardParser is robfig/cron's default: five fields and descriptors.
var standardParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// secondsParser is robfig/cron's WithSeconds parser: six fields.
var secondsParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

type config struct {
	logger     cron.Logger
	node       string
	parser     cron.ScheduleParser
	minHold    time.Duration
	minHoldSet bool
	maxHold    time.Duration
	overlap    Overlap
	failOpen   bool
	leaseTTL   time.Duration
	clock      func() time.Time
	location   *time.Location
	observer   Observer
	spread     bool
	missed     Missed
	election   string // WithLeader; "": per-tick claims
	err        error  // the first invalid option
}

func defaultConfig() config {
	return config{
		logger:   cron.DefaultLogger,
		node:     nodeid.Default(MaxNodeIDLen),
		parser:   standardParser,
		overlap:  OverlapSkip,
		leaseTTL: DefaultLeaseTTL,
		clock:    time.Now,
		location: time.Local,
		spread:   true,
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithLogger sets where the Locker reports skipped ticks (Info), job errors
// and panics, and Redis failures (Error). Default cron.DefaultLogger, which
// prints errors only, like the cron itself; pass
// cron.VerbosePrintfLogger(...) to see skips too. nil discards everything.
func WithLogger(logger cron.Logger) Option {
	return optionFunc(func(c *config) {
		if logger == nil {
			logger = cron.DiscardLogger
		}
		c.logger = logger
	})
}

// WithNodeID names this node in claims, running leases, logs and LastRun
// records (default "<hostname>:<pid>"). It must be 1 to MaxNodeIDLen bytes
// of valid UTF-8 without control characters; an empty ID keeps the default.
func WithNodeID(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			return
		}
		if why := name.Check(id, MaxNodeIDLen); why != "" {
			c.fail("node ID %q: %s", id, why)
			return
		}
		c.node = id
	})
}

// WithParser sets the parser of AddFunc's spec (default: the standard
// five-field parser with descriptors such as "@daily" and "@every 1h",
// the same as cron.New's). nil keeps the default. Give the Locker the same
// parser as the cron, or use WithSeconds.
func WithParser(p cron.ScheduleParser) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.parser = p
		}
	})
}

// WithSeconds makes AddFunc parse six-field specs whose first field is the
// second ("*/5 * * * * *"), like cron.WithSeconds.
func WithSeconds() Option {
	return WithParser(secondsParser)
}

// WithMinHold sets how long a tick's claim stays on Redis after the job's
// next planned fire time: the claim's TTL is (next − planned) + minHold,
// counted by the Redis server, never by a node's clock — ShedLock's
// lockAtLeastFor, measured where it cannot drift. The default is one more
// interval (next − planned), so the claim outlives any run of the same tick
// by a node whose clock lags by less than an interval. Zero keeps the claim
// exactly until the next fire; negative values are invalid. Whatever the
// min hold, a claim lives at least until the end of its tick's window (the
// next fire time by Redis's clock), after which claims of the tick are
// refused as late (SkipLate).
func WithMinHold(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail("negative min hold %v", d)
			return
		}
		c.minHold, c.minHoldSet = d, true
	})
}

// WithMaxHold bounds a run: its context is cancelled, with cause
// ErrMaxHold, this long after it started (default 0: no bound; the
// running lease is renewed for as long as the job runs). The running lease
// is still held until the job returns, so a job that ignores its context
// makes later ticks skip (or wait) rather than overlap. Negative values are
// invalid.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			c.fail("negative max hold %v", d)
			return
		}
		c.maxHold = d
	})
}

// WithOverlap sets what a tick does while the previous run still holds the
// running lease: OverlapSkip (default) or OverlapWait.
func WithOverlap(o Overlap) Option {
	return optionFunc(func(c *config) {
		if o != OverlapSkip && o != OverlapWait {
			c.fail("unknown overlap policy %v", o)
			return
		}
		c.overlap = o
	})
}

// WithFailOpen sets what a tick does when Redis cannot be reached. false
// (the default, fail closed): the tick is skipped on this node and the
// error logged — no run without the lock. true (fail open): the job runs
// anyway, without claim or running lease, and the error is logged; when
// Redis is down every node that fires the tick runs it. A closed
// core.Client never runs a job, whatever this says.
func WithFailOpen(open bool) Option {
	return optionFunc(func(c *config) { c.failOpen = open })
}

// WithSpread says whether ticks spread over the nodes (default true): a
// tick prefers the node that ran the job least recently. The job's record
// lists the nodes that ran its latest runs (up to 8); before it claims a
// tick, a node on that list waits the longer the more recently it ran the
// job — a tenth of the interval (at most maxSpreadDelay, 250 ms) if it ran
// the last tick, a third of that if it is the third and last listed — and
// a node not on it does not wait. So with three nodes the runs go round
// them in turn, and one node does not run everything. It costs one read
// of the LastRun record per tick and node. With false, whichever node
// claims first runs the tick.
func WithSpread(spread bool) Option {
	return optionFunc(func(c *config) { c.spread = spread })
}

// WithLeaseTTL sets the TTL of the running lease (default DefaultLeaseTTL,
// 30 s). The watchdog renews it every ttl/3; if it cannot, the job's
// context is cancelled with a cause matching core.ErrLost. A node that
// dies mid-run blocks the job's later ticks for at most this long. Under
// one millisecond is invalid.
//
// In leader mode (WithLeader) it is the TTL of the leadership instead:
// when a leader dies, no node runs any job for up to this long, until
// another node takes over.
func WithLeaseTTL(ttl time.Duration) Option {
	return optionFunc(func(c *config) {
		if ttl < time.Millisecond {
			c.fail("lease TTL %v (want at least 1ms)", ttl)
			return
		}
		c.leaseTTL = ttl
	})
}

// WithClock sets the clock from which a tick's planned fire time is
// derived and start times are recorded (default time.Now; nil keeps it).
// For tests: a node whose clock runs ahead or behind.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.clock = now
		}
	})
}

// WithLocation sets the time zone in which Job plans ticks of a schedule
// that has none of its own (a spec without CRON_TZ=): it must be the
// location of the cron that runs the job (cron.WithLocation; default
// time.Local, as cron's). nil keeps the default. AddFunc ignores it and
// uses the cron's own location.
func WithLocation(loc *time.Location) Option {
	return optionFunc(func(c *config) {
		if loc != nil {
			c.location = loc
		}
	})
}
