package core_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Bounds of the fault-injection suite: generous limits on things that must
// happen, never performance assertions.
const (
	// lossBound: a holder whose write was rejected as stale must see Lost()
	// close within this long.
	lossBound = 5 * time.Second
	// supersedeBound: how long a paused holder waits for another worker to
	// take the key before it writes anyway.
	supersedeBound = 5 * time.Second
	// lockBound bounds one Lock call of a worker.
	lockBound = 3 * time.Second
)

// A faultRun is one scenario's shared resource and its referee.
//
// The resource is kept twice. The fenced register accepts a write only if
// its fence is at least the last one it accepted; the plain register accepts
// every write, as storage without fencing would. Each register holds a
// counter that every holder increments once: read when it acquires, written
// back (read+1) when its critical section ends. Overlapping holders lose
// updates on the plain register; on the fenced one the late holder's write
// is rejected instead, so its counter equals the accepted increments.
//
// The oracle decides staleness without asking either register: a write is
// stale when, at the time it is made, a lease with a higher fence has
// already been granted (a worker records its grant, with its first write,
// as soon as Lock returns — as a fenced client writes its fence at once).
type faultRun struct {
	t      *testing.T
	name   string
	key    string
	prefix string
	lost   atomic.Int64 // leases reported lost (Observer.LeaseLost)

	mu      sync.Mutex
	granted int64         // oracle: the highest fence granted so far
	owners  map[int64]int // fence -> worker, to catch a fence handed out twice
	fenced  register
	plain   register
	n       counts
	errs    map[string]int // caller-visible errors, by cause
	// knownBug counts superseded holders that nobody told (see release);
	// tolerated only where a test says so.
	knownBug         int
	tolerateKnownBug bool
}

type register struct {
	fence int64 // highest fence written (plain) or accepted (fenced)
	count int64
}

type counts struct {
	acquisitions int
	writes       int // announce and commit writes
	accepted     int // by the fenced register
	rejected     int // by the fenced register (all stale by the oracle)
	violations   int // writes the plain register took over a higher fence
	commits      int // increments acknowledged by the plain register
	commitsOK    int // increments accepted by the fenced register
	lostSeen     int // rejected holders whose Lost() closed
	releaseGone  int // releases that returned ErrNotHeld
	superseded   int // holders that released after a later grant
}

// A holding is one worker's acquisition.
type holding struct {
	w                     int
	l                     *core.Lock
	fencedRead, plainRead int64
}

func newFaultRun(t *testing.T, name string) *faultRun {
	return &faultRun{
		t: t, name: name, key: "register", prefix: testPrefix(),
		owners: map[int64]int{}, errs: map[string]int{},
	}
}

// observer counts lost leases for the run.
func (r *faultRun) observer() core.Observer { return lossCounter{r} }

type lossCounter struct{ r *faultRun }

func (o lossCounter) OpStart(ctx context.Context, _ core.Op, _ string) (context.Context, func(core.OpResult)) {
	return ctx, func(core.OpResult) {}
}

func (o lossCounter) LeaseLost(key string, fence int64, _ time.Duration, cause error) {
	o.r.lost.Add(1)
	if !errors.Is(cause, core.ErrLost) {
		o.r.t.Errorf("%s: LeaseLost(%q, %d) cause does not match ErrLost: %v", o.r.name, key, fence, cause)
	}
}

// redisClient returns a Client on rdb, as one worker process would have.
func (r *faultRun) redisClient(rdb redis.UniversalClient) *core.Client {
	c := core.NewRedis(rdb, core.WithKeyPrefix(r.prefix), core.WithObserver(r.observer()))
	r.t.Cleanup(func() { c.Close() })
	return c
}

// redlockClient returns a Redlock Client over nodes.
func (r *faultRun) redlockClient(nodes []redis.UniversalClient) *core.Client {
	c := core.NewRedlock(nodes, core.WithKeyPrefix(r.prefix), core.WithObserver(r.observer()))
	r.t.Cleanup(func() { c.Close() })
	return c
}

// floor returns the highest fence granted so far: a Lock called now must
// return a higher one.
func (r *faultRun) floor() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.granted
}

// acquired records worker w's grant, checks its fence against floor (the
// highest fence granted before its Lock call began) and makes its first
// write, which reads the counters.
func (r *faultRun) acquired(w int, l *core.Lock, floor int64) *holding {
	f := l.Fence()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n.acquisitions++
	if f <= floor {
		r.t.Errorf("%s: worker %d got fence %d, not above %d granted before its Lock call began", r.name, w, f, floor)
	}
	if prev, dup := r.owners[f]; dup {
		r.t.Errorf("%s: fence %d granted twice (workers %d and %d)", r.name, f, prev, w)
	}
	r.owners[f] = w
	r.granted = max(r.granted, f)
	h := &holding{w: w, l: l, fencedRead: r.fenced.count, plainRead: r.plain.count}
	r.writeLocked(h, false)
	return h
}

// commit is the holder's last write: the counter it read, plus one. It
// reports whether the fenced register accepted it. A holder whose write was
// rejected must be told through Lost() (bounded wait).
func (r *faultRun) commit(h *holding) bool {
	r.mu.Lock()
	ok := r.writeLocked(h, true)
	r.mu.Unlock()
	if !ok {
		r.expectLost(h)
	}
	return ok
}

func (r *faultRun) writeLocked(h *holding, increment bool) bool {
	f := h.l.Fence()
	stale := f < r.granted // the oracle
	r.n.writes++

	if f < r.plain.fence {
		r.n.violations++ // an older holder overwrites a newer one's data
	}
	r.plain.fence = max(r.plain.fence, f)
	if increment {
		r.plain.count = h.plainRead + 1
		r.n.commits++
	}

	accept := f >= r.fenced.fence
	if accept {
		r.fenced.fence = f
		r.n.accepted++
		if increment {
			r.fenced.count = h.fencedRead + 1
			r.n.commitsOK++
		}
	} else {
		r.n.rejected++
	}
	switch {
	case accept && stale:
		r.t.Errorf("%s: fenced register accepted a stale write: worker %d fence %d, fence %d already granted", r.name, h.w, f, r.granted)
	case !accept && !stale:
		r.t.Errorf("%s: fenced register rejected worker %d's fence %d, which no later grant had made stale", r.name, h.w, f)
	}
	return accept
}

// expectLost waits (bounded) for h's Lost() and checks its Err.
func (r *faultRun) expectLost(h *holding) {
	timer := time.NewTimer(lossBound)
	defer timer.Stop()
	select {
	case <-h.l.Lost():
	case <-timer.C:
		r.t.Errorf("%s: worker %d (fence %d): write rejected as stale, but Lost() did not close within %v", r.name, h.w, h.l.Fence(), lossBound)
		return
	}
	if err := h.l.Err(); !errors.Is(err, core.ErrLost) {
		r.t.Errorf("%s: worker %d: Lost() closed but Err() = %v, want ErrLost", r.name, h.w, err)
	}
	r.mu.Lock()
	r.n.lostSeen++
	r.mu.Unlock()
}

// superseded reports whether a higher fence than h's has been granted.
func (r *faultRun) superseded(h *holding) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.granted > h.l.Fence()
}

// awaitSuperseded waits (bounded) until another worker has taken the key
// from h — what a paused holder does not notice, but the test waits for, so
// that its next write is certain to be late.
func (r *faultRun) awaitSuperseded(h *holding) bool {
	deadline := time.Now().Add(supersedeBound)
	for !r.superseded(h) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// release ends h. A holder that was superseded while it held the lease
// (a later grant was recorded before it called Release) must have been told:
// by Lost(), or by Release returning ErrNotHeld.
func (r *faultRun) release(h *holding) error {
	superseded := r.superseded(h)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.l.Release(ctx)
	told := closed(h.l.Lost()) || errors.Is(err, core.ErrNotHeld)
	r.mu.Lock()
	defer r.mu.Unlock()
	if superseded {
		r.n.superseded++
		if !told {
			if r.tolerateKnownBug {
				r.knownBug++
			} else {
				r.t.Errorf("%s: worker %d (fence %d) was superseded while holding, yet neither Lost() nor Release told it (Release: %v)", r.name, h.w, h.l.Fence(), err)
			}
		}
	}
	switch {
	case errors.Is(err, core.ErrNotHeld):
		r.n.releaseGone++
	case err != nil:
		r.noteLocked("release", err)
	}
	return err
}

// callerError records an error a worker saw; it must name a known cause.
func (r *faultRun) callerError(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(op, err)
}

func (r *faultRun) noteLocked(op string, err error) {
	cause := causeOf(err)
	if cause == "" || !strings.HasPrefix(err.Error(), "core: ") {
		r.t.Errorf("%s: %s error does not name a known cause: %v", r.name, op, err)
		cause = "unexplained"
	}
	r.errs[op+": "+cause]++
}

// causeOf names the cause an error carries, or "" if it carries none this
// suite expects.
func causeOf(err error) string {
	var qe *core.QuorumError
	var ne net.Error
	switch {
	case errors.As(err, &qe):
		return "quorum (" + qe.Op + ")"
	case errors.Is(err, core.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
		return "wait timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return "connection closed"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, redis.ErrPoolTimeout):
		return "pool timeout"
	}
	return ""
}

// summary logs the run's figures and checks the end state.
func (r *faultRun) summary() counts {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	if r.fenced.count != int64(n.commitsOK) {
		r.t.Errorf("%s: fenced counter %d, but %d increments were accepted: the fenced register lost updates", r.name, r.fenced.count, n.commitsOK)
	}
	if lost := int(r.lost.Load()); lost < n.lostSeen {
		r.t.Errorf("%s: %d rejected holders saw Lost(), but the Observer counted only %d losses", r.name, n.lostSeen, lost)
	}
	var errs []string
	for k, v := range r.errs {
		errs = append(errs, fmt.Sprintf("%s ×%d", k, v))
	}
	slices.Sort(errs)
	known := ""
	if r.knownBug > 0 {
		known = fmt.Sprintf("; KNOWN BUG: %d superseded holders were never told", r.knownBug)
	}
	r.t.Logf("%s: %d acquisitions; fenced register: %d writes accepted, %d stale writes rejected (counter %d = increments accepted); "+
		"unfenced path would have let through %d violations (older fence over newer) and lost %d of %d increments (counter %d); "+
		"%d leases reported lost (%d after a rejected write), %d holders superseded, %d releases found the lease gone; caller errors: [%s]%s",
		r.name, n.acquisitions, n.accepted, n.rejected, r.fenced.count,
		n.violations, int64(n.commits)-r.plain.count, n.commits, r.plain.count,
		r.lost.Load(), n.lostSeen, n.superseded, n.releaseGone, strings.Join(errs, ", "), known)
	return n
}

// A crew is a set of workers, each with its own Client (as separate
// processes would have), contending for the run's key until stopped.
type crew struct {
	r      *faultRun
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// body is a worker's critical section; it must commit (or decide not to).
type body func(w, round int, h *holding)

// holdFor returns a body that holds the lock for a random time up to d,
// then commits.
func (r *faultRun) holdFor(d time.Duration) body {
	return func(_, _ int, h *holding) {
		time.Sleep(rand.N(d + 1))
		r.commit(h)
	}
}

// startCrew starts one worker per client. Each worker loops: Lock, body,
// Release, for rounds rounds (0: until stop). The crew's Clients are closed
// as their workers end.
func (r *faultRun) startCrew(clients []*core.Client, rounds int, b body, opts ...core.LockOption) *crew {
	cr := &crew{r: r}
	cr.ctx, cr.cancel = context.WithCancel(context.Background())
	for w, c := range clients {
		cr.wg.Add(1)
		go func() {
			defer cr.wg.Done()
			defer c.Close()
			for round := 0; rounds == 0 || round < rounds; round++ {
				if cr.ctx.Err() != nil {
					return
				}
				floor := r.floor()
				ctx, cancel := context.WithTimeout(cr.ctx, lockBound)
				l, err := c.Lock(ctx, r.key, opts...)
				cancel()
				if err != nil {
					if cr.ctx.Err() != nil {
						return
					}
					r.callerError("lock", err)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				h := r.acquired(w, l, floor)
				b(w, round, h)
				r.release(h)
			}
		}()
	}
	return cr
}

// stop ends the workers (after their current round) and waits for them.
func (cr *crew) stop() {
	cr.cancel()
	cr.wg.Wait()
}

// wait waits for workers with a fixed number of rounds.
func (cr *crew) wait() {
	cr.wg.Wait()
	cr.cancel()
}

// faultRedis returns a go-redis client for one worker: context deadlines
// bound its commands, and its timeouts are short enough that a dead or
// silent server is noticed within a lease.
func faultRedis(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		PoolSize:              4,
		MaxRetries:            2,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// noLeaks checks, after the test and all its cleanups, that it left no
// goroutine running. Call it first, so that its cleanup runs last.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(opt); err != nil {
			t.Errorf("goroutines left behind: %v", err)
		}
	})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
