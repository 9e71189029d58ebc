package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/internal/errjoin"
	"github.com/redis/go-redis/v9"
)

// NewRedlock returns a Client whose leases live on N independent Redis
// masters (the Redlock algorithm), with the same contract as NewRedis.
//
// Every operation asks all nodes in parallel, each bounded by a per-node
// timeout far below the TTL (a tenth of it, within 100–500 ms). An acquisition
// succeeds when N/2+1 nodes granted it and the validity left — TTL minus
// the time the round took minus a drift allowance of TTL×1% + 2 ms — is
// positive; it returns as soon as that majority answered, so dead nodes do
// not slow it. Otherwise the lease is released on every node, including
// those that did not answer (under a token of the caller's, only where it
// set the lease: see WithToken; a node whose answer was lost and that
// go-redis asked again answers as a re-entry, so under a token of the
// caller's its lease stays until its TTL), and the error is ErrNotAcquired when other
// holders stood in the way (the waiter retries after a random delay or a
// release notification) or a *QuorumError naming each failed node. A
// release returns as soon as a majority deleted the lease; the other nodes'
// deletes follow (Close waits for them). Renewal needs a majority too, and re-creates the lease on a node that lost it
// (restarted empty) while a majority still holds it. The fence is the
// highest of the nodes' counters. The client proposes the same fence to
// every node (its clock in µs plus 100 ms), and a node whose counter is
// below it takes it, up to 200 ms above its own clock: so nodes with
// clocks that roughly agree return equal fences. When fewer than a
// majority returned the highest, it is written back to a majority before
// the lock is returned. Either way the next holder's fence is higher.
//
// A Client's own Lock and Do callers of one key take turns: one at a time
// asks the nodes, the others wait in line in arrival order (a caller that
// released the key and asks again joins the end of it), so they never
// split the nodes' votes among themselves; a caller whose Client holds the
// key waits for its release before asking. TryLock, WithToken and
// WithRetryBudget callers do not wait in line.
//
// What Redlock does not guarantee: its safety assumes bounded clock drift
// and process pauses. A node whose clock jumps forward expires the lease
// early; a node that restarts without fsync'ed persistence forgets it — two
// such faults at once in a group of five, and two clients can each count a
// majority. A holder paused past its TTL still believes it holds the lock.
// In all these cases the fence is what keeps data safe: storage that rejects
// lower fences turns an overlap into a rejected write. WithFair is not
// available on Redlock. Re-entering a lease with WithToken takes a new
// fence, above the original acquisition's, as on a single server. No nodes
// is ErrInvalidOption, a
// nil node ErrNilClient.
func NewRedlock(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: Redlock needs at least one node", ErrInvalidOption)
	}
	for i, rdb := range nodes {
		if isNil(rdb) {
			return nil, fmt.Errorf("%w: node %d", ErrNilClient, i)
		}
	}
	c, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	rl := &redlockBackend{quorum: len(nodes)/2 + 1, work: make(chan func()), quit: make(chan struct{})}
	for i, rdb := range nodes {
		rl.nodes = append(rl.nodes, newRedisBackend(rdb, &c.cfg))
		rl.names = append(rl.names, nodeName(i, rdb))
	}
	c.setBackend(rl, 2*time.Second, CapNotify|CapReplicaAck|CapList|CapClaims)
	c.ts = &turnstiles{}
	for _, nd := range rl.nodes {
		nd.ps.init(nd.rdb, c.nt, false)
	}
	return c, nil
}

// A QuorumError reports a Redlock operation that failed because too few
// nodes answered. errors.Is finds each node's error in it.
type QuorumError struct {
	Op    string      // "acquire", "extend", "release"
	Got   int         // nodes that succeeded
	Need  int         // the majority
	Nodes []NodeError // the nodes that failed
}

// A NodeError is one node's failure in a QuorumError.
type NodeError struct {
	Node string // the node's address, or "node <i>"
	Err  error
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "core: redlock %s: %d of %d nodes needed", e.Op, e.Got, e.Need)
	for _, n := range e.Nodes {
		fmt.Fprintf(&b, "; %s: %v", n.Node, n.Err)
	}
	return b.String()
}

// Unwrap returns the nodes' errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Nodes))
	for i, n := range e.Nodes {
		errs[i] = n.Err
	}
	return errs
}

func nodeName(i int, rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok && c != nil {
		return c.Options().Addr
	}
	return fmt.Sprintf("node %d", i)
}

var _ healer = (*redlockBackend)(nil)

// redlockBackend runs every operation on all nodes.
type redlockBackend struct {
	nodes  []*redisBackend
	names  []string
	quorum int
	wg     sync.WaitGroup // workers running

	work chan func()   // to a worker waiting for one
	quit chan struct{} // closed by close: waiting workers end
	idle atomic.Int32  // workers waiting for work

	mu       sync.Mutex
	closed   bool
	inflight map[string]*calls // by token: its node calls still running
}

// maxIdleWorkers bounds the workers that wait for work, per node.
const maxIdleWorkers = 8

// spawn runs f on a worker — one that waits for work if there is one, else
// a new one — unless the backend is closed (then it reports false and runs
// nothing). Node calls run on workers rather than a goroutine each: a new
// goroutine's stack grows (and is copied) to what a go-redis call needs on
// every call, a worker's has grown already. At most maxIdleWorkers per node
// wait for more; the rest end when their call does, and close ends them all.
func (b *redlockBackend) spawn(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	select {
	case b.work <- f:
	default:
		b.wg.Add(1)
		go b.worker(f)
	}
	return true
}

// worker runs f, then what spawn hands it while it waits, until close or
// until enough others wait.
func (b *redlockBackend) worker(f func()) {
	defer b.wg.Done()
	for {
		f()
		if b.idle.Add(1) > int32(maxIdleWorkers*len(b.nodes)) {
			b.idle.Add(-1)
			return
		}
		select {
		case f = <-b.work:
			b.idle.Add(-1)
		case <-b.quit:
			return
		}
	}
}

// nodeTimeout bounds one node's answer: a tenth of the TTL, between 100 ms
// (a first call dials and loads scripts) and 500 ms.
func nodeTimeout(ttl time.Duration) time.Duration {
	return max(min(ttl/10, 500*time.Millisecond), 100*time.Millisecond)
}

// drift is Redlock's allowance for clock drift between nodes.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// fanout runs call on every node in parallel, each bounded by timeout, and
// feeds the replies to done, in arrival order, until done returns true or
// all replied or the timeout passed. Calls still running then go on in the
// background, to their own timeout — so a lease granted by a slow node is
// in place too — and Close waits for them. They are not cancelled with ctx.
//
// It returns the nodes whose reply done never saw, each with an error
// saying so, for the callers that must name them.
func (b *redlockBackend) fanout(ctx context.Context, timeout time.Duration, call func(ctx context.Context, i int) nodeReply, done func(nodeReply) bool) (unanswered []nodeReply) {
	return b.fanoutTracked(ctx, timeout, nil, call, done)
}

// fanoutTracked is fanout that also counts the node calls in pending.
func (b *redlockBackend) fanoutTracked(ctx context.Context, timeout time.Duration, pending *calls, call func(ctx context.Context, i int) nodeReply, done func(nodeReply) bool) (unanswered []nodeReply) {
	// One deadline for all the calls, released by the last to end.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	var running atomic.Int32
	running.Store(int32(len(b.nodes)))
	end := func() {
		if running.Add(-1) == 0 {
			cancel()
		}
	}
	ch := make(chan nodeReply, len(b.nodes))
	for i := range b.nodes {
		if pending != nil {
			pending.add(i)
		}
		ok := b.spawn(func() {
			r := call(callCtx, i)
			r.i = i
			ch <- r
			end()
			if pending != nil {
				pending.done(i)
			}
		})
		if !ok {
			end()
			if pending != nil {
				pending.done(i)
			}
			ch <- nodeReply{i: i, err: ErrClosed}
		}
	}
	seen := make([]bool, len(b.nodes))
	missing := func() []nodeReply {
		var out []nodeReply
		for i, ok := range seen {
			if !ok {
				out = append(out, nodeReply{i: i, err: noAnswer(timeout)})
			}
		}
		return out
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for range b.nodes {
		select {
		case r := <-ch:
			seen[r.i] = true
			if done(r) {
				return missing()
			}
		case <-timer.C:
			return missing()
		}
	}
	return nil
}

// noAnswer is the error of a node that did not answer within the timeout
// (formatted only if someone reads it: most acquisitions leave two nodes
// unanswered and never do).
type noAnswer time.Duration

func (e noAnswer) Error() string { return "no answer within " + time.Duration(e).String() }

type nodeReply struct {
	i   int
	acq acquireResult
	ok  bool
	v   string
	err error
}

func (b *redlockBackend) quorumError(op string, got int, failed []nodeReply) *QuorumError {
	e := &QuorumError{Op: op, Got: got, Need: b.quorum}
	for _, r := range failed {
		e.Nodes = append(e.Nodes, NodeError{Node: b.names[r.i], Err: r.err})
	}
	return e
}

// announce publishes on every node; one that answers is enough.
func (b *redlockBackend) announce(ctx context.Context, channel, payload string) error {
	var errs []error
	for _, nd := range b.nodes {
		if err := nd.announce(ctx, channel, payload); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(b.nodes) {
		return errjoin.Join(errs...)
	}
	return nil
}

func (b *redlockBackend) subscribe(ctx context.Context, channel string) error {
	var errs []error
	for _, nd := range b.nodes {
		if err := nd.subscribe(ctx, channel); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(b.nodes) {
		return errjoin.Join(errs...)
	}
	return nil
}

func (b *redlockBackend) unsubscribe(channels ...string) {
	for _, nd := range b.nodes {
		nd.unsubscribe(channels...)
	}
}

func (b *redlockBackend) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.quit)
	}
	b.mu.Unlock()
	for _, nd := range b.nodes {
		nd.close()
	}
	b.wg.Wait()
}
