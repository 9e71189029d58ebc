package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The watchdog keeps a Client's auto-renewed leases: it renews each at
// ttl/3 and retries a failed renewal while the lease's deadline allows. Its
// loop only schedules: every renewal runs in a goroutine of its own batch,
// so no renewal ever waits on another, and the loss of a lease is declared
// by the lease's own deadline timer (see lease), never by the loop.
//
// Renewals due together are batched (one pipeline per batch, grouped per
// Cluster master, so a slow shard holds up only its own keys; on Redis the
// mutex leases of a batch that share a server, or a Cluster slot, are
// renewed by one script call). A renewal
// that fails, or gets no answer within a third of its lease's remaining
// time, is given up on and retried, in a batch of retries apart from the
// renewals on schedule, so that leases in trouble do not shorten the
// attempts of the others, nor multiply the calls when a server is
// overloaded; each lease of a batch is given up on in its own time (see
// renew). A lease whose renewal the server refused with an error reply
// about the call retries alone: the reply does not say which lease of its
// batch was at fault (see refused). A late answer
// to a renewal given up on still counts if it confirms the lease.
type watchdog struct {
	c *Client

	ctx    context.Context // renewal calls; cancelled by shutdown
	cancel context.CancelFunc

	mu      sync.Mutex
	h       cohortHeap         // auto-renewed leases waiting for their next renewal, in cohorts
	tail    *cohort            // the cohort created last, while on the heap: leases join it (see cohort)
	spare   []*cohort          // cohorts off the heap, emptied, for new ones (recycle)
	epoch   time.Time          // the heap's due times count from here (monotonic)
	live    map[leaseID]*lease // every lease not yet released, twins chained (lease.twin)
	armedAt time.Time          // when the loop will look next (zero: idle)
	kick    chan struct{}      // capacity 1: a lease is due before armedAt
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
	calls   sync.WaitGroup // renewal goroutines

	// Releases on their way to the server, and acquisitions under way
	// with a token of the caller's (WithToken), per lease and token (with
	// mu): such an acquisition may run on the server before a release of
	// its token deletes what it got (see add).
	releasing map[leaseID]int
	tokens    map[leaseID]*tokenWatch
}

// maxBatch bounds how many renewals go into one pipeline; batchWindow is how
// early a lease may be renewed to join a batch.
const (
	maxBatch    = 512
	batchWindow = 10 * time.Millisecond
	maxSpare    = 32 // emptied cohorts kept for reuse (watchdog.spare)
)

func (w *watchdog) init(c *Client) {
	w.c = c
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.live = make(map[leaseID]*lease)
	w.epoch = time.Now()
	w.kick = make(chan struct{}, 1)
	w.stop = make(chan struct{})
	w.done = make(chan struct{})
}

// A leaseID names a lease within a Client: its key and token.
type leaseID struct{ lease, token string } // names.lease: a key's mutex and semaphore differ

// add registers a new lease: its deadline timer starts, and an auto-renewed
// one is scheduled for its first renewal. It reports false after shutdown,
// and (setting tk.void) for the lease of an acquisition with a token of
// the caller's (tk) while a release of that token is on its way, or if one
// ended meanwhile: the release may have deleted what the acquisition got,
// after it had listed the twins it tells (remove).
func (w *watchdog) add(l *lease, tk *tokenTicket) bool {
	l.arm()
	id := leaseID{l.n.lease, l.token}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false
	}
	if tk != nil && (w.releasing[id] > 0 || tk.tw.ended != tk.ended) {
		tk.void = true
		w.mu.Unlock()
		return false
	}
	l.twin, w.live[id], l.registered = w.live[id], l, true
	wake := false
	if l.autoRenew {
		wake = w.pushLocked(l, l.start.Add(l.ttl/3))
	}
	w.mu.Unlock()
	if wake {
		w.wake()
	}
	return true
}

// schedule (re)places l in the heap at due. It reports false after shutdown.
func (w *watchdog) schedule(l *lease, due time.Time) bool {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false
	}
	if !l.registered { // released meanwhile
		w.mu.Unlock()
		return true
	}
	wake := w.pushLocked(l, due)
	w.mu.Unlock()
	if wake {
		w.wake()
	}
	return true
}

// A cohort is auto-renewed leases due for renewal at about the same time:
// the heap holds one entry per cohort, not one per lease. A lease due at d
// joins the cohort created last if that one is due at most batchWindow
// before d, never after it, and is not full (maxBatch); otherwise it starts
// a cohort of its own. A lease is never renewed late, and at most two
// batchWindows early: the loop takes, with a cohort that is due, those due
// within batchWindow after it. The leases of a batch, renewed together,
// come due together again and rejoin one cohort: with 100,000 leases the
// heap holds a few hundred entries, and scheduling a renewal is an append
// rather than a heap push and pop (which read a cache line or two per
// level).
type cohort struct {
	at      int64     // due, in ns since watchdog.epoch
	due     time.Time // the same instant
	idx     int       // heap index; -1 once off the heap (due, or emptied)
	members []*lease  // each with co == this cohort, ci its index here
}

// pushLocked (re)schedules l for due, with w.mu held, and reports whether
// the loop must be woken: only if it would otherwise look too late (a loop
// armed for an earlier time picks this lease up then), which keeps the hot
// path (acquire, release, acquire...) from waking a goroutine every time.
func (w *watchdog) pushLocked(l *lease, due time.Time) bool {
	if l.co != nil {
		w.leaveLocked(l)
	}
	at := int64(due.Sub(w.epoch))
	co := w.tail
	if co == nil || co.at > at || at-co.at > int64(batchWindow) || len(co.members) >= maxBatch {
		if n := len(w.spare); n > 0 {
			co, w.spare = w.spare[n-1], w.spare[:n-1]
			co.at, co.due = at, due
		} else {
			co = &cohort{at: at, due: due, idx: -1}
		}
		w.h.push(at, co)
		w.tail = co
	}
	l.co, l.ci = co, len(co.members)
	co.members = append(co.members, l)
	wake := w.armedAt.IsZero() || co.due.Before(w.armedAt)
	if wake {
		w.armedAt = co.due
	}
	if !w.started {
		w.started = true
		go w.run()
	}
	return wake
}

// leaveLocked takes l out of its cohort, with w.mu held; a cohort left
// empty leaves the heap.
func (w *watchdog) leaveLocked(l *lease) {
	co, i := l.co, l.ci
	last := len(co.members) - 1
	if i != last {
		m := co.members[last]
		co.members[i], m.ci = m, i
	}
	co.members[last] = nil
	co.members = co.members[:last]
	l.co = nil
	if last == 0 && co.idx >= 0 {
		w.h.remove(co.idx)
		if w.tail == co {
			w.tail = nil
		}
		w.recycle(co)
	}
}

// recycle keeps co, off the heap, not the tail and with no member pointing
// at it, for a new cohort (pushLocked), with w.mu held: a cohort per lease
// acquired and released before its first renewal would otherwise be two
// allocations (the cohort and its members).
func (w *watchdog) recycle(co *cohort) {
	if len(w.spare) < maxSpare {
		clear(co.members)
		co.members = co.members[:0]
		w.spare = append(w.spare, co)
	}
}

func (w *watchdog) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// scheduleIdle schedules an auto-renewed lease that has no renewal under
// way and none scheduled: after a late answer confirmed it while no retry
// was left to send, it still needs its next renewal.
func (w *watchdog) scheduleIdle(l *lease, due time.Time) {
	l.mu.Lock()
	idle := l.autoRenew && !l.renewing && !l.released && l.lostErr == nil
	l.mu.Unlock()
	if !idle {
		return
	}
	w.mu.Lock()
	scheduled := l.co != nil
	w.mu.Unlock()
	if !scheduled {
		w.schedule(l, due)
	}
}

// goCounted runs f in a goroutine that Close waits for; it reports false
// (and runs nothing) once the Client is shutting down.
func (w *watchdog) goCounted(f func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.calls.Add(1)
	go func() {
		defer w.calls.Done()
		f()
	}()
	return true
}

// remove forgets a released lease and returns its twins: the other
// leases of its key and token in this Client (re-entered by WithToken),
// which share the server's lease its release deletes. The release is on
// its way until released is called.
func (w *watchdog) remove(l *lease) (twins []*lease) {
	id := leaseID{l.n.lease, l.token}
	w.mu.Lock()
	if w.releasing == nil {
		w.releasing = make(map[leaseID]int)
	}
	w.releasing[id]++
	if l.registered {
		var prev *lease
		for t := w.live[id]; t != nil; t = t.twin {
			if t != l {
				twins = append(twins, t)
				prev = t
				continue
			}
			switch {
			case prev != nil:
				prev.twin = l.twin
			case l.twin != nil:
				w.live[id] = l.twin
			default:
				delete(w.live, id)
			}
		}
		l.registered, l.twin = false, nil
	}
	if l.co != nil {
		w.leaveLocked(l)
	}
	w.mu.Unlock()
	return twins
}

// A tokenWatch counts, for one lease and token, the acquisitions under way
// that present the token (WithToken), and the releases of the token that
// ended while any was under way.
type tokenWatch struct {
	n     int    // acquisitions under way
	ended uint64 // releases ended
}

// A tokenTicket is one acquisition with a token of the caller's, under
// way: the releases of the token that had ended when it was sent.
type tokenTicket struct {
	id    leaseID
	tw    *tokenWatch
	ended uint64
	void  bool // set by add: a release of the token was under way, or ended meanwhile
}

// watchToken is called before an acquisition with a token of the
// caller's is sent; unwatchToken after it is registered or failed.
func (w *watchdog) watchToken(id leaseID) *tokenTicket {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tokens == nil {
		w.tokens = make(map[leaseID]*tokenWatch)
	}
	tw := w.tokens[id]
	if tw == nil {
		tw = &tokenWatch{}
		w.tokens[id] = tw
	}
	tw.n++
	return &tokenTicket{id: id, tw: tw, ended: tw.ended}
}

func (w *watchdog) unwatchToken(tk *tokenTicket) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if tk.tw.n--; tk.tw.n == 0 && w.tokens[tk.id] == tk.tw {
		delete(w.tokens, tk.id)
	}
}

// releaseToken announces a release of id's token that is no lease's own
// (a waiter giving up): it returns the leases of id, which that release
// deletes. The release is on its way until released is called.
func (w *watchdog) releaseToken(id leaseID) (twins []*lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.releasing == nil {
		w.releasing = make(map[leaseID]int)
	}
	w.releasing[id]++
	for t := w.live[id]; t != nil; t = t.twin {
		twins = append(twins, t)
	}
	return twins
}

// released is called when a server's release of id's token, which remove
// or releaseToken announced, ended (whatever its outcome): acquisitions of
// the token still under way may have been undone by it, and add refuses
// them.
func (w *watchdog) released(id leaseID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.releasing[id]--; w.releasing[id] <= 0 {
		delete(w.releasing, id)
	}
	if tw := w.tokens[id]; tw != nil {
		tw.ended++
	}
}

// shutdown stops the loop, cancels the renewal calls and returns every
// lease still registered, wherever its renewal is.
func (w *watchdog) shutdown() []*lease {
	w.mu.Lock()
	w.stopped = true
	started := w.started
	kept := make([]*lease, 0, len(w.live))
	for _, head := range w.live {
		for l := head; l != nil; l = l.twin {
			kept = append(kept, l)
			l.co = nil
		}
	}
	w.live, w.h, w.tail = nil, nil, nil
	w.mu.Unlock()
	w.cancel()
	if started {
		close(w.stop)
		<-w.done
	}
	return kept
}

// wait waits for the renewal goroutines (after shutdown, which cancelled
// their calls).
func (w *watchdog) wait() { w.calls.Wait() }

func (w *watchdog) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*lease
	for {
		due = due[:0]
		w.mu.Lock()
		now := time.Now()
		nowAt := int64(now.Sub(w.epoch))
		horizon := nowAt + int64(batchWindow)
		due = w.takeDueLocked(due, nowAt, horizon)
		var wait time.Duration
		switch {
		case len(w.h) > 0:
			w.armedAt = w.h[0].c.due
			wait = w.armedAt.Sub(now)
		case w.armedAt.After(now):
			// Every lease it was armed for was released: it looks at the
			// time it promised anyway. Going idle instead would make the
			// next add wake it — and on the hot path (acquire, release,
			// acquire...) the heap is empty again by the time it runs, so
			// every acquisition would wake it.
			wait = w.armedAt.Sub(now)
		default:
			w.armedAt = time.Time{}
		}
		w.mu.Unlock()
		if len(due) > 0 {
			w.dispatch(due)
			continue
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-tick:
		case <-w.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-w.stop:
			return
		}
	}
}

// takeDueLocked appends to due the leases of the cohorts due at nowAt, and
// of those due by horizon after them, up to about 8 batches, and takes
// those cohorts off the heap (w.mu held).
func (w *watchdog) takeDueLocked(due []*lease, nowAt, horizon int64) []*lease {
	for len(w.h) > 0 && len(due) < 8*maxBatch && (w.h[0].at <= nowAt ||
		len(due) > 0 && w.h[0].at <= horizon) {
		co := w.h.remove(0)
		if w.tail == co {
			w.tail = nil
		}
		for _, l := range co.members {
			l.co = nil
		}
		due = append(due, co.members...)
		w.recycle(co)
	}
	return due
}

// dispatch starts the renewals of the leases that came due, without
// waiting for any, in batches per shard: those due on schedule together,
// those retrying after no answer together, apart from the first (their
// calls are likelier to run late). A lease whose last renewal the server
// refused (an error reply, which names no lease of a batch: the lease at
// fault may be any) goes alone, so that one lease's trouble does not
// become its batch's.
func (w *watchdog) dispatch(due []*lease) {
	var batch, retries []*lease
	for _, l := range due {
		l.mu.Lock()
		skip := l.released || l.lostErr != nil || l.renewing // a renewal under way reschedules on its own
		retry, alone := l.renewErr != nil, l.renewErr != nil && l.retryAlone
		if !skip {
			l.renewing = true
			l.armLocked() // the deadline timer, from the first renewal on
		}
		l.mu.Unlock()
		switch {
		case skip:
		case alone:
			w.start([]*lease{l})
		case retry:
			retries = append(retries, l)
		default:
			batch = append(batch, l)
		}
	}
	if len(batch) == 0 && len(retries) == 0 {
		return
	}
	sh, ok := w.c.be.(sharder)
	if !ok || !sh.sharded() {
		w.startBatches(batch)
		w.startBatches(retries)
		return
	}
	// Finding a key's shard may need the cluster's slot map: do it off the
	// loop.
	w.calls.Add(1)
	go func() {
		defer w.calls.Done()
		for _, list := range [2][]*lease{batch, retries} {
			groups := make(map[string][]*lease)
			var order []string
			for _, l := range list {
				s := sh.shard(w.ctx, l.n.lease)
				if _, ok := groups[s]; !ok {
					order = append(order, s)
				}
				groups[s] = append(groups[s], l)
			}
			for _, s := range order {
				w.startBatches(groups[s])
			}
		}
	}()
}

// startBatches starts the renewals of list in batches of at most maxBatch.
func (w *watchdog) startBatches(list []*lease) {
	for len(list) > 0 {
		n := min(len(list), maxBatch)
		w.start(list[:n:n])
		list = list[n:]
	}
}

// refused reports whether err is the server's error reply (go-redis's
// redis.Error) about what a call asked, rather than no answer (a timeout,
// a connection lost) or a reply about the server's own state (loading,
// busy with a script, out of memory, read-only, a cluster or replica
// down, out of connections, not authenticated): no lease is at fault then,
// and batches hold the calls down on a server in trouble.
func refused(err error) bool {
	var re interface {
		error
		RedisError()
	}
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "BUSY", "OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MISCONF",
		"NOAUTH", "WRONGPASS": // the connection's, as much as the server's
		return false
	}
	return !strings.HasPrefix(msg, "ERR max number of clients")
}

// start runs one batch of renewals in a goroutine.
func (w *watchdog) start(batch []*lease) {
	w.calls.Add(1)
	go func() {
		defer w.calls.Done()
		w.renew(batch)
	}()
}

// errNoAnswer is the cause recorded for a renewal given up on: a timeout,
// as a renewal call that timed out reports (context.DeadlineExceeded).
var errNoAnswer = fmt.Errorf("no answer to its renewal in time: %w", context.DeadlineExceeded)

// renew sends one batch and hands each lease its outcome. It gives up
// waiting for a lease's renewal after a third of the time the lease's
// deadline leaves (the lease then retries), each lease at its own time —
// the leases of a batch of retries may have very different times left —
// but keeps listening for a late answer until the longest of them.
func (w *watchdog) renew(batch []*lease) {
	sent := time.Now()
	reqs := make([]extendReq, len(batch))
	attempts := make([]time.Duration, len(batch))
	var longest time.Duration
	for i, l := range batch {
		l.mu.Lock()
		if l.boxed[0] == nil {
			l.boxed = [2]any{l.n.lease, l.token}
		}
		reqs[i] = extendReq{n: &l.n, token: l.token, boxed: &l.boxed, ttl: l.ttl, keep: l.keepCounter(sent, l.ttl)}
		attempts[i] = max(l.deadline.Sub(sent)/3, time.Millisecond)
		longest = max(longest, attempts[i])
		l.mu.Unlock()
	}
	var ends []func(OpResult)
	if obs := w.c.cfg.observer; obs != nil {
		ends = make([]func(OpResult), len(batch))
		for i, l := range batch {
			_, ends[i] = obs.OpStart(l.observerContext(), OpRenew, l.key, l.kind)
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, longest)
	defer cancel()
	done := make(chan struct{})
	w.calls.Add(1)
	go func() {
		defer w.calls.Done()
		w.c.be.extend(ctx, reqs)
		close(done)
	}()
	given := w.giveUp(ctx, batch, attempts, sent, done)
	for i, l := range batch {
		r := &reqs[i]
		if ends != nil {
			err := r.err
			if err == nil && !r.ok {
				err = fmt.Errorf("%w: %q: lease expired or taken over", ErrNotHeld, l.key)
			}
			ends[i](OpResult{Err: err, Fence: l.fence})
		}
		w.c.renewed(ctx, l, sent, r, given == nil || !given[i])
	}
}

// giveUp waits for done, and gives up on the renewal of each lease of
// batch whose attempt (sent plus attempts[i], and a little more: the Redis
// client may not honour ctx's deadline, ContextTimeoutEnabled off) ends
// first: the lease then retries, and the answer, when it comes, only
// confirms. It returns which leases it gave up on (nil: none). The leases
// are put in order of their attempts only if the shortest ends first,
// which a batch answered in time never pays for.
func (w *watchdog) giveUp(ctx context.Context, batch []*lease, attempts []time.Duration, sent time.Time, done <-chan struct{}) (given []bool) {
	end := func(i int) time.Time { return sent.Add(attempts[i] + attempts[i]/10 + time.Millisecond) }
	first := 0
	for i, a := range attempts {
		if a < attempts[first] {
			first = i
		}
	}
	timer := time.NewTimer(time.Until(end(first)))
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	}
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(attempts[a], attempts[b]) })
	given = make([]bool, len(batch))
	for k := 0; ; {
		now := time.Now()
		for ; k < len(order) && !end(order[k]).After(now); k++ {
			i := order[k]
			given[i] = true
			w.c.renewed(ctx, batch[i], sent, &extendReq{err: errNoAnswer}, true)
		}
		if k == len(order) {
			break
		}
		timer.Reset(time.Until(end(order[k])))
		select {
		case <-done:
			return given
		case <-timer.C:
		}
	}
	<-done
	return given
}

// renewed applies the outcome of a renewal sent at sent. A confirmation
// moves the deadline whenever it arrives; only the current attempt's
// outcome (current) schedules the next renewal or a retry.
func (c *Client) renewed(ctx context.Context, l *lease, sent time.Time, r *extendReq, current bool) {
	switch {
	case r.err == nil && r.ok:
		l.confirm(sent, r.left)
		if r.keep {
			l.keptCounter(sent)
		}
		if len(r.heal) > 0 {
			c.heal(context.WithoutCancel(ctx), l, r)
		}
	case r.err == nil:
		l.markLost(lostError(l.key, errors.New("lease expired or taken over")))
		return
	}
	if !current {
		if r.err == nil && r.ok {
			c.wd.scheduleIdle(l, sent.Add(l.ttlNow()/3))
		}
		return
	}
	l.mu.Lock()
	l.renewing = false
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	var due time.Time
	if r.err == nil {
		l.renewErr = nil
		due = sent.Add(l.ttl / 3)
	} else {
		// Keep the most telling failure: a timeout near the deadline says
		// less than the error that started the trouble.
		if l.renewErr == nil || !errors.Is(r.err, context.DeadlineExceeded) && !errors.Is(r.err, errNoAnswer) {
			l.renewErr = r.err
		}
		l.retryAlone = refused(r.err)
		due = time.Now().Add(retryDelay(l.ttl))
		if !due.Before(l.deadline) { // the deadline timer reports it
			l.mu.Unlock()
			return
		}
	}
	l.mu.Unlock()
	c.wd.schedule(l, due)
}

// retryDelay is the pause before retrying a failed renewal.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 5*time.Millisecond), time.Second)
}

// cohortHeap orders cohorts by due time, a min-heap. Each entry keeps its
// due time beside the cohort: comparing two entries follows no pointer. A
// cohort's idx is its entry's index. The operations are typed, not
// container/heap's: an entry boxed in an interface would cost an
// allocation.
type cohortHeap []heapEntry

type heapEntry struct {
	at int64 // c.at
	c  *cohort
}

func (h cohortHeap) set(i int, e heapEntry) {
	h[i] = e
	e.c.idx = i
}

// The heap is 4-ary: an entry's children are 4i+1 to 4i+4, side by side
// in one or two cache lines, so a pop reads half as many lines and moves
// half as many entries as a binary heap's would.
const heapArity = 4

// up moves the entry at i towards the root while it is due before its parent.
func (h cohortHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / heapArity
		if h[p].at <= e.at {
			break
		}
		h.set(i, h[p])
		i = p
	}
	h.set(i, e)
}

// down moves the entry at i towards the leaves while a child is due before it.
func (h cohortHeap) down(i int) {
	e, n := h[i], len(h)
	for {
		first := heapArity*i + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < min(first+heapArity, n); k++ {
			if h[k].at < h[c].at {
				c = k
			}
		}
		if e.at <= h[c].at {
			break
		}
		h.set(i, h[c])
		i = c
	}
	h.set(i, e)
}

func (h *cohortHeap) push(at int64, c *cohort) {
	*h = append(*h, heapEntry{at: at, c: c})
	h.up(len(*h) - 1)
}

// fix restores the order after the entry at i changed its time.
func (h cohortHeap) fix(i int) {
	if i > 0 && h[i].at < h[(i-1)/heapArity].at {
		h.up(i)
	} else {
		h.down(i)
	}
}

// remove takes the entry at i out and returns its cohort (idx -1).
func (h *cohortHeap) remove(i int) *cohort {
	old := *h
	c, last := old[i].c, len(old)-1
	if i != last {
		old.set(i, old[last])
	}
	old[last] = heapEntry{}
	*h = old[:last]
	if i != last {
		h.fix(i)
	}
	c.idx = -1
	return c
}
