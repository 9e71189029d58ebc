package cronlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/name"
	"github.com/latchkey/latchkey/internal/nilness"
	"github.com/robfig/cron/v3"
)

// A Locker makes cron jobs run once per tick across the nodes that share
// its Redis. Create one per node (per process) on that node's *core.Client;
// it is safe for concurrent use. With per-tick claims (the default) it
// keeps no goroutines of its own and needs no closing; in leader mode
// (WithLeader) Start campaigns in a goroutine (and, with WithMissed, a new
// leader looks back in another) and Close ends them. Its locks and records
// live under the Client's key prefix (core.WithKeyPrefix):
//
//	cron:<name>:<planned unix>   the claim of one tick (a record set only if
//	                             absent; never released; expires)
//	cron:<name>:running          the running lease (renewed while the job runs)
//	cron:<name>:last             the LastRun record
//	cron:<election>:leader       the leadership (WithLeader; a core lease
//	                             whose metadata is the leader's node ID)
//
// On Redis these are "<prefix>:{<key>}" (plus ":fence" for the core fence
// counter and ":rec" for records).
//
// Closing the core.Client cancels the contexts of the jobs still running
// (their leases are lost) and stops further ticks from running on this
// node. Stop the cron first: ctx := c.Stop(); client.Close(); <-ctx.Done().
// In leader mode, close the Locker before the Client, so that it resigns
// only once its jobs have returned: <-c.Stop().Done(); l.Close(ctx);
// client.Close().
type Locker struct {
	client *core.Client
	store  *core.Records
	cfg    config
	leader *leader // WithLeader; nil: per-tick claims

	mu   sync.Mutex
	jobs []*job // every job made, for look-backs (WithMissed)
}

// New returns a Locker on client. New does no I/O. The error is
// ErrNilClient for a nil client, or ErrInvalidOption saying which option
// is wrong.
func New(client *core.Client, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, ErrNilClient
	}
	l := &Locker{client: client, cfg: defaultConfig()}
	for _, o := range opts {
		if o != nil {
			o.apply(&l.cfg)
		}
	}
	if l.cfg.err != nil {
		return nil, l.cfg.err
	}
	// Ticks are claimed as records, judged by the store's clock.
	if err := client.Require(core.CapClaims); err != nil {
		return nil, fmt.Errorf("%w: cronlock needs a backend with claims: %w", ErrInvalidOption, err)
	}
	if l.cfg.election != "" {
		if l.cfg.failOpen {
			return nil, fmt.Errorf("%w: WithFailOpen(true) with WithLeader: a node that cannot reach Redis does not lead", ErrInvalidOption)
		}
		l.leader = newLeader(l.cfg.election)
	}
	l.store = client.Records()
	return l, nil
}

// AddFunc schedules fn on c under name: spec is parsed with the Locker's
// parser (WithParser, WithSeconds), and every tick runs fn on at most one
// of the nodes that add the same name — see Job for how. It returns c's
// entry ID, or an error matching ErrInvalidName, ErrInvalidSchedule or
// ErrInvalidOption (and then schedules nothing).
//
// This:
//
//	id, err := l.AddFunc(c, spec, name, fn)
//
// is equivalent to:
//
//	sched, err := parser.Parse(spec)
//	job, err := l.Job(name, sched, fn) // with c.Location() as WithLocation
//	id := c.Schedule(cronlock.Aligned(sched), job)
//
// so an "@every d" spec fires on every node at the same epoch-aligned
// times (see Aligned), not d after each node's cron started. The job goes
// through c's chain (cron.WithChain) like any other.
//
// With WithMissed other than MissedSkip, AddFunc also schedules on c a
// one-shot entry that fires once, when c starts (at once if it runs), and
// looks for the job's missed ticks, as Locker.CatchUp does for every job:
// a fleet back from an outage runs what it missed without waiting for the
// next tick. Its schedule's Next is the zero time after that (robfig/cron
// then never runs it); removing the job's entry from c leaves it there.
func (l *Locker) AddFunc(c *cron.Cron, spec, name string, fn func(ctx context.Context) error) (cron.EntryID, error) {
	if c == nil {
		return 0, fmt.Errorf("%w: nil *cron.Cron", ErrInvalidOption)
	}
	if err := validName(name); err != nil {
		return 0, err
	}
	sched, err := l.cfg.parser.Parse(spec)
	if err != nil {
		if hint := parseHint(spec, l.cfg.parser); hint != "" {
			return 0, fmt.Errorf("%w: %q: %w (%s)", ErrInvalidSchedule, spec, err, hint)
		}
		return 0, fmt.Errorf("%w: %q: %w", ErrInvalidSchedule, spec, err)
	}
	j, err := l.newJob(name, sched, fn, c.Location())
	if err != nil {
		return 0, err
	}
	id := c.Schedule(Aligned(sched), j)
	if l.cfg.missed.catchesUp() {
		c.Schedule(&atStart{}, startJob{j})
	}
	return id, nil
}

// Job returns a cron.Job that runs fn under name at most once per tick of
// schedule across every node that runs a job of the same name on the same
// Redis. Schedule it with c.Schedule(cronlock.Aligned(schedule), job), on a
// cron in the Locker's location (WithLocation).
//
// Each Run:
//
//  1. derives the tick's planned fire time from the schedule and the clock
//     (see Aligned; "@every d" uses the epoch-aligned interval index), not
//     from when Run happened to be called;
//  2. claims the tick: a set-if-absent record "cron:<name>:<planned unix>"
//     (one script), whose TTL — counted by Redis — runs until the next fire
//     time plus the min hold (WithMinHold), and at least until the end of
//     the tick's window. The claim is never released, so a fast job on a
//     node whose clock runs ahead cannot let a node whose clock lags run the
//     same tick again. A node that loses the claim skips (SkipClaimed). The
//     window is the time from the planned fire time to the next one, judged
//     by Redis's clock: a claim that reaches Redis later — the node, its link
//     or Redis stalled — is refused and the node skips (SkipLate), so a tick
//     runs on one node at most whatever the delays;
//  3. takes the running lease "cron:<name>:running", renewed by the core
//     watchdog, so that a tick arriving while the previous run still runs
//     is skipped or waits (WithOverlap);
//  4. calls fn with a context that is cancelled when the running lease is
//     lost (cause matching core.ErrLost) or the max hold passes (cause
//     ErrMaxHold), and carries the Tick (TickFromContext);
//  5. records the run for LastRun, logs an error or a panic through the
//     cron.Logger (a panic never reaches the cron), and releases the
//     running lease.
//
// With WithMissed other than MissedSkip, between steps 3 and 4 the node
// looks back for ticks missed since the job's last run and runs the ones
// the policy says, each claimed on its own, under the same running lease.
// Ticks missed while no tick fired (the fleet was down) are found when the
// cron starts: AddFunc arranges it; with Job, call Locker.CatchUp.
//
// When Redis cannot be reached the tick is skipped and logged, or run
// without the lock with WithFailOpen(true).
//
// In leader mode (WithLeader), steps 2 and 3 are replaced by a check in
// memory: the tick runs if this node leads (else SkipNotLeader), the job's
// previous run on this node has ended (WithOverlap) and the tick is later
// than the last one run — by this term, or by the previous leader as the
// LastRun record, read at the job's first tick of the term, says (else
// SkipClaimed). The job's context is then cancelled when the leadership
// is lost or the Locker closed, and carries the leadership's fence.
//
// Job returns an error matching ErrInvalidName, ErrInvalidSchedule or
// ErrInvalidOption (a nil fn) instead of a job that could never work.
func (l *Locker) Job(name string, schedule cron.Schedule, fn func(ctx context.Context) error) (cron.Job, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	return l.newJob(name, schedule, fn, l.cfg.location)
}

// job is the cron.Job that Job and AddFunc return.
type job struct {
	l       *Locker
	name    string
	sched   cron.Schedule // aligned
	loc     *time.Location
	fn      func(context.Context) error
	runKey  string
	lastKey string
}

func (l *Locker) newJob(name string, schedule cron.Schedule, fn func(context.Context) error, loc *time.Location) (*job, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil func for job %q", ErrInvalidOption, name)
	}
	if nilness.IsNil(schedule) {
		return nil, fmt.Errorf("%w: nil schedule for job %q", ErrInvalidSchedule, name)
	}
	if loc == nil {
		loc = time.Local
	}
	sched := Aligned(schedule)
	if sched.Next(l.cfg.clock().In(loc)).IsZero() {
		return nil, fmt.Errorf("%w: job %q never fires", ErrInvalidSchedule, name)
	}
	j := &job{
		l: l, name: name, sched: sched, loc: loc, fn: fn,
		runKey: "cron:" + name + ":running", lastKey: lastKey(name),
	}
	l.mu.Lock()
	l.jobs = append(l.jobs, j)
	l.mu.Unlock()
	return j, nil
}

// Run runs one tick; see Locker.Job.
func (j *job) Run() {
	now := j.l.cfg.clock().In(j.loc)
	planned, next, err := plan(j.sched, now)
	if err != nil {
		j.l.cfg.logger.Error(err, "cannot plan tick", "job", j.name, "now", now, "node", j.l.cfg.node)
		return
	}
	j.tick(planned, next)
}

// claimKey is the lock key of the tick planned at p.
func (j *job) claimKey(p time.Time) string {
	s := strconv.FormatInt(p.Unix(), 10)
	if ns := p.Nanosecond(); ns != 0 {
		s += fmt.Sprintf(".%09d", ns)
	}
	return "cron:" + j.name + ":" + s
}

func lastKey(name string) string { return "cron:" + name + ":last" }

// validName checks a job name.
func validName(job string) error {
	if why := name.Check(job, MaxNameLen); why != "" {
		return fmt.Errorf("%w: %q: %s", ErrInvalidName, job, why)
	}
	return nil
}

// parseHint says what to change when a spec has one field too many or too
// few for the parser in use, the common mix-up with cron.WithSeconds.
func parseHint(spec string, p cron.ScheduleParser) string {
	if strings.HasPrefix(strings.TrimSpace(spec), "@") {
		return ""
	}
	fields := len(strings.Fields(spec))
	switch {
	case fields == 6 && p == standardParser:
		if _, err := secondsParser.Parse(spec); err == nil {
			return "the schedule has 6 fields, seconds first: use cronlock.WithSeconds(), as with cron.WithSeconds()"
		}
	case fields == 5 && p == secondsParser:
		if _, err := standardParser.Parse(spec); err == nil {
			return "the schedule has 5 fields but cronlock.WithSeconds() expects 6: drop WithSeconds or add a seconds field"
		}
	}
	return ""
}
