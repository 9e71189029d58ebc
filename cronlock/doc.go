// Package cronlock makes a named robfig/cron/v3 job run at most once per
// scheduled tick across every node that schedules it on the same Redis —
// however fast the job, and while the nodes' clocks disagree by less than
// an interval — and exactly once when a node fires the tick, Redis answers
// and the previous run has finished.
//
// Every node runs the same binary with its own cron.Cron and its own
// Locker, and adds the job under the same name:
//
//	client, err := core.NewRedis(rdb)                   // one per process
//	l, err := cronlock.New(client, cronlock.WithSeconds()) // check each err
//	c := cron.New(cron.WithSeconds())
//	_, err = l.AddFunc(c, "0 0 3 * * *", "report:daily", func(ctx context.Context) error {
//		tick, _ := cronlock.TickFromContext(ctx)
//		return buildReport(ctx, tick.Planned) // ctx ends if the lease is lost
//	})
//	c.Start()
//
// AddFunc is Job plus the scheduling; this:
//
//	l.AddFunc(c, spec, name, fn)
//
// is equivalent to:
//
//	sched, _ := parser.Parse(spec)
//	job, _ := l.Job(name, sched, fn)
//	c.Schedule(cronlock.Aligned(sched), job)
//
// # How a tick runs once
//
// A tick is named by the job name and its planned fire time, derived from
// the schedule — the last fire time at or before the node's clock, and for
// "@every d" the epoch-aligned interval index — never from the moment the
// job happened to start. Its claim, the record
// "cron:<name>:<planned unix>", is set only if absent and never released: it
// expires, counted by Redis, one min hold (WithMinHold, default one
// interval) after the next fire time. So a node whose clock runs ahead and
// whose job takes a millisecond leaves the tick claimed for the node whose
// clock lags; that node plans the same tick, finds it claimed and skips.
// This is where lock-per-job designs (gocron's Locker, ShedLock without
// lockAtLeastFor) run a tick twice.
//
// A claim is judged on arrival by Redis's clock, inside the claim script:
// one that reaches Redis after the tick's window — until the next planned
// fire time — is refused (SkipLate), and a claim in time lives at least
// until the window ends. So a claim held up past its tick's claim TTL — a
// stalled node, network link or Redis — can never find the tick's claim
// expired and run the tick again: every tick runs on one node at most,
// whatever the delays. Nodes whose clocks lag by less than an interval
// still get their ticks; a tick whose every claim arrives late runs on no
// node.
//
// A second lock, the running lease "cron:<name>:running", is held while the
// job runs and renewed by the core watchdog. A tick that arrives while a
// previous run still holds it is skipped (default) or waits until the next
// fire time (WithOverlap). If the lease is lost — the node stalled past its
// TTL, Redis lost the key — the job's context is cancelled with a cause
// matching core.ErrLost; WithMaxHold cancels it with ErrMaxHold.
//
// # Leader mode
//
// WithLeader makes the nodes elect one leader (core.Client.Campaign on
// "cron:<election>:leader"), and the leader runs every tick of every job;
// the other nodes skip their ticks (SkipNotLeader) without asking Redis:
//
//	l, err := cronlock.New(client, cronlock.WithLeader("billing"))
//	_, err = l.AddFunc(c, "@every 10s", "rollup", rollup)
//	l.Start()                  // campaign in the background
//	c.Start()
//	...
//	<-c.Stop().Done()
//	err = l.Close(ctx)         // resign: another node leads at once
//
// While a node leads, a tick's decision is made in memory: no claim, no
// running lease, no renewal per tick — the leadership is one lease,
// renewed by the core watchdog — and only the LastRun record is written.
// The job's Tick carries the leadership's fence, and its context is
// cancelled with a cause matching core.ErrLost when the leadership is
// lost; no job starts once the node has been told. A new leader reads each
// job's LastRun record once, at the job's first tick of its term, and
// skips the ticks its predecessor already ran; with WithMissed it runs the
// ticks that no node ran while no node led, as soon as it leads.
//
// Leader mode is the better choice for many jobs or very frequent ticks:
// per tick there is no Redis work to decide who runs (per-tick claims cost
// every node a claim, and the winner a lease to take, renew and release),
// and the jobs stay on one warm node, whose in-memory state — caches, open
// connections, what the last run left behind — the next run can use.
// Per-tick claims are the better choice when the load should spread over
// the nodes (in leader mode it is all on the leader), and when ticks must
// not be missed: when a leader dies, no tick runs anywhere until its lease
// expires, up to one lease TTL (WithLeaseTTL) — a graceful Close hands over
// at once; WithMissed runs such ticks late. And a claim is judged by Redis
// on every tick, while a leader that pauses (GC, swap) past its lease's TTL
// can run a job after the next leader took over: then only the fence,
// checked by the storage the job writes to, keeps the paused leader's
// writes out.
//
// # Missed ticks
//
// A tick that no node fired — every node down, every process stalled
// through it, Redis unreachable, no leader — is missed. By default it is
// not run later (MissedSkip), as robfig/cron does not catch up.
// WithMissed(MissedRunOnce()) runs the job once for its missed ticks, for
// the latest; WithMissed(MissedRunAll(n)) runs each of them, oldest first,
// at most the latest n; .Within(d) leaves alone those older than d:
//
//	l, err := cronlock.New(client, cronlock.WithMissed(cronlock.MissedRunAll(24).Within(24*time.Hour)))
//
// Missed ticks are the fire times after the job's LastRun record that no
// run served and that did not come while that run ran. Nodes look for them
// when their cron starts (AddFunc schedules a one-shot entry; with Job,
// call Locker.CatchUp), before running a tick (a process that slept
// through ticks) and, in leader mode, when they start to lead (the
// takeover gap). Each catch-up run is claimed by its planned time, as the
// tick would have been, so no two nodes run it, and runs under the running
// lease like any run; its Tick and its record have CatchUp set and
// Planned the missed time. A look-back that finds missed ticks logs
// "missed" and tells an Observer that implements MissedObserver.
//
// # When things fail
//
// Redis unreachable: the tick is skipped on this node and the error logged
// (fail closed); WithFailOpen(true) runs it without the lock instead. A
// claim whose answer was lost may have been stored all the same: the
// go-redis client sends it again (MaxRetries), and a claim sent again
// knows its own, so the node runs the tick; with no retry left (or
// MaxRetries -1), the node skips as above and the claim it may have made
// keeps the other nodes from the tick too, so the tick runs nowhere. A
// job's error or panic is logged through the cron.Logger (WithLogger) and
// kept in the record that LastRun reads from any node; a panic never
// reaches the cron. Names are checked when the job is made: empty, longer
// than MaxNameLen or with control characters is ErrInvalidName.
//
// # Watching it
//
// WithObserver installs an Observer that is told when each tick starts on
// this node and how it ended — ran, skipped (and why), failed or lost —
// with the job name, planned time, node, fence and duration. The context
// it returns is the parent of the tick's lock operations and of the job
// function's context. An Observer that also implements MissedObserver is
// told of missed ticks (WithMissed). Package otel implements both, with
// spans and metrics:
//
//	inst := otel.New(otel.WithTracerProvider(tp), otel.WithMeterProvider(mp))
//	client, err := core.NewRedis(rdb, core.WithObserver(inst))
//	l, err := cronlock.New(client, cronlock.WithObserver(inst))
//
// # What it cannot do
//
// Ticks that no node fires — every node down, or every node's process
// stalled through the tick — are not run later, nor are ticks whose claims
// all reached Redis after their window (SkipLate), unless WithMissed says
// so; and then only those since the job's last recorded run. A Redis whose
// clock jumps back may accept a late claim. A Redis that loses its data
// (restart without persistence, failover to a replica that missed the
// write) forgets the claims of recent ticks, so a node with a lagging clock
// may run such a tick again, and forgets the running lease, so the next
// tick may start on another node while a run goes on until its node's
// next renewal (a third of WithLeaseTTL) cancels it with core.ErrLost;
// use the Tick's Fence for writes that must not repeat. With OverlapSkip,
// a node whose clock runs ahead may fire a tick while the previous run
// still holds the running lease and skip it — claimed, so no node on time
// runs it after that run ended; OverlapWait does not lose it. Nodes must
// agree on the schedule's time zone (CRON_TZ= in the
// spec, or the same cron.WithLocation) — a tick is a point in time, and
// "03:00" in two zones is two ticks.
package cronlock
