package core_test

// The referee of the fault-injection suite (fault_test.go): the fenced and
// the plain register, the oracle that decides which writes are stale, the
// checks made on every grant, write and release, and the summary.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
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
	start  time.Time
	lost   atomic.Int64 // leases reported lost (Observer.LeaseLost)
	active atomic.Int64 // crew workers still running

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
	crew                  bool // a crew worker (else a scenario's own victim)
	l                     *core.Lock
	fencedRead, plainRead int64
}

func newFaultRun(t *testing.T, name string) *faultRun {
	return &faultRun{
		t: t, name: name, key: "register", prefix: testPrefix(), start: time.Now(),
		owners: map[int64]int{}, errs: map[string]int{},
	}
}

// counts returns a snapshot of the run's counters.
func (r *faultRun) counts() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
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
	r.debugf("w%d acquired %d", w, f)
	return h
}

// commit is the holder's last write: the counter it read, plus one. It
// reports whether the fenced register accepted it. A holder whose write was
// rejected must be told through Lost() (bounded wait).
func (r *faultRun) commit(h *holding) bool {
	r.mu.Lock()
	ok := r.writeLocked(h, true)
	r.mu.Unlock()
	r.debugf("w%d commit %d ok=%v lost=%v", h.w, h.l.Fence(), ok, closed(h.l.Lost()))
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

// holder returns the worker that took the highest fence so far.
func (r *faultRun) holder() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.owners[r.granted]
	return w, ok
}

// awaitSuperseded waits (bounded) until another worker has taken the key
// from h — what a paused holder does not notice, but the test waits for, so
// that its next write is certain to be late. It gives up early when no
// other crew worker is left to take the key.
func (r *faultRun) awaitSuperseded(h *holding) bool {
	deadline := time.Now().Add(supersedeBound)
	self := int64(0)
	if h.crew {
		self = 1
	}
	for !r.superseded(h) {
		if time.Now().After(deadline) || r.active.Load() <= self {
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
	r.debugf("w%d release %d: %v", h.w, h.l.Fence(), err)
	// Any Release error tells the holder something went wrong; a nil one
	// with Lost() open tells it all was well.
	told := closed(h.l.Lost()) || err != nil
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
	r.debugf("%s error: %v", op, err)
}

// causeOf names the cause an error carries, or "" if it carries none this
// suite expects.
func causeOf(err error) string {
	var qe *core.QuorumError
	var ne net.Error
	switch {
	case errors.As(err, &qe):
		if len(qe.Nodes) == 0 {
			return "quorum (" + qe.Op + ", no node named)"
		}
		return "quorum (" + qe.Op + ")"
	case errors.Is(err, core.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
		return "wait timeout"
	case errors.Is(err, core.ErrLateAnswer):
		return "late answer"
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

// debugf traces the run with LATCHKEY_FAULT_TRACE=1 (for diagnosing a
// failure: grants, writes, releases, failed operations, faults).
func (r *faultRun) debugf(format string, args ...any) {
	if os.Getenv("LATCHKEY_FAULT_TRACE") == "1" {
		r.t.Logf("%s +%v: "+format, append([]any{r.name, time.Since(r.start).Round(time.Millisecond)}, args...)...)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// mustBite summarises the run and fails the test if no stale write was
// rejected — the scenario did not produce the overlap it is there to show.
func (r *faultRun) mustBite(t *testing.T, what string) {
	t.Helper()
	if n := r.summary(); n.violations == 0 || n.rejected == 0 {
		t.Errorf("%s: the scenario did not bite", what)
	}
}
