package cronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/errjoin"
	"github.com/latchkey/latchkey/internal/name"
)

// WithLeader puts the Locker in leader mode: the nodes elect one leader
// among the Lockers of the same election (on the same Redis, under the
// same key prefix), and the leader runs every tick of every job it has;
// the others skip their ticks (SkipNotLeader). Default: off — each tick
// is claimed on its own (per-tick claims), as the package doc describes.
//
// election names the election, "cron:<election>:leader" on Redis: every
// node that runs the same set of jobs gives the same name, and Lockers
// with other jobs on the same Redis and prefix give another, or they
// would elect one leader for both sets. It must be 1 to MaxNameLen bytes
// of valid UTF-8 without control characters; anything else, "" included,
// is ErrInvalidOption. So is WithFailOpen(true) with it: a node that
// cannot reach Redis does not lead, and runs nothing.
//
// Start campaigns in the background (core.Client.Campaign, with this
// node's ID as the announcement) until Close; the leadership is a lease of
// WithLeaseTTL, renewed by the core watchdog. While the node leads, a tick
// runs the job at once: the decision is made in memory, without a Redis
// round trip, and no claim, running lease or renewal is made per tick —
// only the LastRun record is written (at the start and the end of the
// run). The job's context carries the leadership's fence in its Tick
// (the same for every run of one term, higher for every later term), and
// is cancelled with a cause matching core.ErrLost when the leadership is
// lost; a tick never starts a job after this node was told it lost. The
// node then campaigns again, and another node leads within about one
// lease TTL. Close cancels the jobs still running, waits for them and
// resigns, so the next leader takes over at once.
//
// A new leader reads each job's LastRun record once, at the job's first
// tick of its term, and skips (SkipClaimed) the ticks its predecessor
// already started, so a graceful handover runs no tick twice, whatever
// the nodes' clocks say. WithOverlap applies on the leader, in memory: a
// tick that comes while the job's previous run on this node still runs is
// skipped or waits. WithMinHold and WithSpread have no effect in leader
// mode, since there are no claims.
//
// With WithMissed, a node that starts to lead looks back at once, in a
// goroutine that Close waits for, for the missed ticks of every job the
// Locker made, and runs them as the policy says — the ticks of the
// takeover gap, when no node led — each claimed on Redis by its planned
// time, and under the leadership's fence; each of its ticks looks back
// too (a leader whose process slept through ticks). Only these catch-up
// runs write claims in leader mode.
//
// Leader mode beats per-tick claims when there are many jobs or very
// frequent ticks: the decision costs no Redis work, the other nodes do none
// at all, and jobs stay on one warm node whose in-memory state (caches,
// connections, what the last run left) they can use. It does worse when the
// jobs' load should be spread — all of it is on the leader — and when a
// tick must not be missed: after a leader dies, no node runs any tick until
// its lease expires (up to one lease TTL), and such ticks run late, if at
// all (WithMissed). A leader that pauses (GC, swap) past its TTL may run a
// job while the next leader runs it too: only the fence, checked by the
// storage the job writes to, stops it then. Per-tick claims are judged by
// Redis on every tick and do not have that gap.
func WithLeader(election string) Option {
	return optionFunc(func(c *config) {
		if why := name.Check(election, MaxNameLen); why != "" {
			c.fail("election %q: %s", election, why)
			return
		}
		c.election = election
	})
}

// errNotStarted is logged by ticks of a Locker in leader mode that was
// never started.
var errNotStarted = errors.New("cronlock: leader mode, but Locker.Start was not called")

// leader is the state of leader mode (WithLeader).
type leader struct {
	election string
	key      string // the election's lock key
	closing  chan struct{}
	resigned error // the cause of a job context cancelled by Close
	done     chan struct{}

	mu           sync.Mutex
	started      bool
	closed       bool
	clientClosed bool
	cancel       context.CancelFunc       // ends the campaign
	term         *term                    // the leadership while it lasts
	active       int                      // runs begun and not finished
	idle         chan struct{}            // closed when active drops to 0 after Close
	slots        map[string]chan struct{} // one run of a job name at a time
	catching     sync.WaitGroup           // a new term's look-backs (WithMissed)
}

func newLeader(election string) *leader {
	key := "cron:" + election + ":leader"
	return &leader{
		election: election,
		key:      key,
		closing:  make(chan struct{}),
		resigned: fmt.Errorf("%w: leadership of %q resigned (%w)", ErrClosed, election, core.ErrLost),
		done:     make(chan struct{}),
		slots:    map[string]chan struct{}{},
	}
}

// Start begins leader mode (WithLeader): the Locker campaigns for the
// leadership in a goroutine of its own, and ticks run on this node while
// it leads, until Close. Until Start, every tick is skipped and logged as
// an error. Start does not wait; calling it again, or after Close, does
// nothing. Without WithLeader it does nothing.
func (l *Locker) Start() {
	ld := l.leader
	if ld == nil {
		return
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.started || ld.closed {
		return
	}
	ld.started = true
	ctx, cancel := context.WithCancel(context.Background())
	ld.cancel = cancel
	go l.campaign(ctx)
}

// Leading reports whether this Locker leads its election now (WithLeader):
// its ticks run here. It is false without WithLeader, before Start, after
// Close and from the moment the leadership is lost. Who leads can also be
// watched from anywhere with core.Client.Observe on
// "cron:<election>:leader": Info.Metadata is the leader's node ID.
func (l *Locker) Leading() bool {
	ld := l.leader
	if ld == nil {
		return false
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return !ld.closed && ld.term != nil && ld.term.lock.Err() == nil
}

// Close ends leader mode (WithLeader): it stops the campaign, cancels the
// contexts of the jobs still running under the leadership (cause matching
// ErrClosed and core.ErrLost), waits until they return, then resigns, so
// that another node leads at once. Ticks after Close are skipped
// (SkipClosed). Stop the cron first and wait for its jobs:
//
//	<-c.Stop().Done()
//	err := l.Close(ctx)
//
// If ctx ends while jobs still run, Close resigns anyway and returns an
// error matching ctx's; until then the leadership is kept, so no other
// node runs a job while this one's still runs. The resignation runs even
// on a cancelled ctx (core.Lock.Release). A failed resignation is
// returned; the leadership then ends at its TTL. Later calls return nil.
// Without WithLeader, Close does nothing and returns nil. Closing the
// core.Client also ends leader mode, without waiting for the jobs.
func (l *Locker) Close(ctx context.Context) error {
	ld := l.leader
	if ld == nil {
		return nil
	}
	ld.mu.Lock()
	if ld.closed {
		ld.mu.Unlock()
		return nil
	}
	ld.closed = true
	close(ld.closing)
	started := ld.started
	if ld.cancel != nil {
		ld.cancel()
	}
	var idle chan struct{}
	if ld.active > 0 {
		ld.idle = make(chan struct{})
		idle = ld.idle
	}
	ld.mu.Unlock()

	if started {
		select {
		case <-ld.done:
		case <-ctx.Done(): // it resigns by itself if it wins now
		}
	}
	var err error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			err = fmt.Errorf("cronlock: close: resigned while jobs still run: %w", context.Cause(ctx))
		}
	}
	ld.mu.Lock()
	t := ld.term
	ld.term = nil
	if t != nil {
		t.ended, t.released = true, true // resign now, even while runs are left
	}
	ld.mu.Unlock()
	if t != nil {
		rel := t.lock.Release(ctx)
		if rel != nil && t.lock.Err() == nil && !errors.Is(rel, core.ErrClosed) {
			err = errjoin.Join(err, fmt.Errorf("cronlock: resign %q: %w", ld.election, rel))
		}
	}
	return err
}

// campaign runs until ctx ends or the core.Client is closed: it waits for
// the leadership, holds it until it is lost, and waits again.
func (l *Locker) campaign(ctx context.Context) {
	ld := l.leader
	defer close(ld.done)
	defer ld.catching.Wait()
	log := l.cfg.logger
	kv := []any{"election", ld.election, "node", l.cfg.node}
	retry := min(max(l.cfg.leaseTTL/3, 10*time.Millisecond), time.Second)
	failing := false
	for {
		lk, err := l.client.Campaign(ctx, ld.key, l.cfg.node, core.WithTTL(l.cfg.leaseTTL))
		switch {
		case ctx.Err() != nil:
			if err == nil { // won as Close came: Close did not see it
				_ = lk.Release(ctx)
			}
			return
		case errors.Is(err, core.ErrClosed):
			ld.mu.Lock()
			ld.clientClosed = true
			ld.mu.Unlock()
			return
		case err != nil:
			if !failing {
				log.Error(err, "cannot campaign for the leadership; retrying", kv...)
				failing = true
			}
			t := time.NewTimer(retry)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		failing = false
		t := &term{lock: lk, floors: map[string]time.Time{}, lasts: map[string]Run{}}
		if l.cfg.missed.catchesUp() {
			t.lookedBack = make(chan struct{})
		}
		ld.mu.Lock()
		ld.term = t
		ld.mu.Unlock()
		log.Info("leading", with(kv, "fence", lk.Fence())...)
		if t.lookedBack != nil { // the ticks of the takeover gap
			ld.catching.Go(func() {
				defer close(t.lookedBack)
				_ = l.CatchUp(ctx)
			})
		}
		select {
		case <-lk.Lost():
		case <-ctx.Done():
			return // Close resigns once the jobs have returned
		}
		ld.mu.Lock()
		if ld.term == t {
			ld.term = nil
		}
		release := t.end()
		ld.mu.Unlock()
		if release { // else the term's last run releases it when it returns
			_ = lk.Release(ctx)
		}
		if errors.Is(lk.Err(), core.ErrClosed) {
			ld.mu.Lock()
			ld.clientClosed = true
			ld.mu.Unlock()
			return
		}
		log.Error(lk.Err(), "leadership lost: running jobs cancelled; campaigning again", with(kv, "fence", lk.Fence())...)
	}
}
