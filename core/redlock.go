package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
// those that did not answer, and the error is ErrNotAcquired when other
// holders stood in the way (the waiter retries after a random delay or a
// release notification) or a *QuorumError naming each failed node. Renewal
// needs a majority too, and re-creates the lease on a node that lost it
// (restarted empty) while a majority still holds it. The fence is the
// highest of the nodes' counters, written back to a majority before the lock
// is returned, so the next holder's fence is higher.
//
// What Redlock does not guarantee: its safety assumes bounded clock drift
// and process pauses. A node whose clock jumps forward expires the lease
// early; a node that restarts without fsync'ed persistence forgets it — two
// such faults at once in a group of five, and two clients can each count a
// majority. A holder paused past its TTL still believes it holds the lock.
// In all these cases the fence is what keeps data safe: storage that rejects
// lower fences turns an overlap into a rejected write. WithFair is not
// available on Redlock. Re-entering a lease with WithToken may report a
// higher fence than the original acquisition (the highest counter among the
// nodes that answered), never a lower one.
func NewRedlock(nodes []redis.UniversalClient, opts ...Option) *Client {
	c := newClient(opts)
	if len(nodes) == 0 && c.cfg.err == nil {
		c.cfg.err = fmt.Errorf("%w: Redlock needs at least one node", ErrInvalidOption)
	}
	rl := &redlockBackend{quorum: len(nodes)/2 + 1}
	for i, rdb := range nodes {
		if isNil(rdb) {
			if c.cfg.err == nil {
				c.cfg.err = fmt.Errorf("%w: node %d", ErrNilClient, i)
			}
			rdb = nil
		}
		rl.nodes = append(rl.nodes, &redisBackend{rdb: rdb, ackN: c.cfg.ackN, ackTimeout: c.cfg.ackTimeout})
		rl.names = append(rl.names, nodeName(i, rdb))
	}
	c.setBackend(rl, 2*time.Second)
	for _, nd := range rl.nodes {
		nd.ps.init(nd.rdb, c.nt)
	}
	return c
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
	wg     sync.WaitGroup // node calls still running

	mu       sync.Mutex
	closed   bool
	inflight map[string]*sync.WaitGroup // by token: acquire calls still running
}

// spawn runs f in a goroutine counted in b.wg, unless the backend is
// closed (then it reports false and runs nothing).
func (b *redlockBackend) spawn(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
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
func (b *redlockBackend) fanoutTracked(ctx context.Context, timeout time.Duration, pending *sync.WaitGroup, call func(ctx context.Context, i int) nodeReply, done func(nodeReply) bool) (unanswered []nodeReply) {
	base := context.WithoutCancel(ctx)
	ch := make(chan nodeReply, len(b.nodes))
	for i := range b.nodes {
		if pending != nil {
			pending.Add(1)
		}
		ok := b.spawn(func() {
			if pending != nil {
				defer pending.Done()
			}
			ctx, cancel := context.WithTimeout(base, timeout)
			defer cancel()
			r := call(ctx, i)
			r.i = i
			ch <- r
		})
		if !ok {
			if pending != nil {
				pending.Done()
			}
			ch <- nodeReply{i: i, err: ErrClosed}
		}
	}
	seen := make([]bool, len(b.nodes))
	missing := func() []nodeReply {
		var out []nodeReply
		for i, ok := range seen {
			if !ok {
				out = append(out, nodeReply{i: i, err: fmt.Errorf("no answer within %v", timeout)})
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

func (b *redlockBackend) acquire(ctx context.Context, n names, token, value string, ttl time.Duration, fair, _ bool) (acquireResult, error) {
	if fair {
		return acquireResult{}, fmt.Errorf("%w: fair mode is not available on Redlock", ErrInvalidOption)
	}
	start := time.Now()
	var won, held, failed []nodeReply
	// Node calls that answer after the outcome is known still set the
	// lease; a release of this token waits for them first.
	pending := b.track(token)
	defer b.untrack(token, pending)
	unanswered := b.fanoutTracked(ctx, nodeTimeout(ttl), pending, func(ctx context.Context, i int) nodeReply {
		r, err := b.nodes[i].acquire(ctx, n, token, value, ttl, false, false)
		return nodeReply{acq: r, err: err}
	}, func(r nodeReply) bool {
		switch {
		case r.err != nil:
			failed = append(failed, r)
		case r.acq.acquired:
			won = append(won, r)
		default:
			held = append(held, r)
		}
		return len(won) >= b.quorum || len(held)+len(failed) > len(b.nodes)-b.quorum
	})
	validity := ttl - time.Since(start) - drift(ttl)
	if len(won) >= b.quorum && validity > 0 {
		fence, err := b.settleFence(ctx, n, won, ttl)
		if err != nil {
			b.releaseAll(ctx, n, token)
			return acquireResult{}, err
		}
		return acquireResult{acquired: true, fence: fence}, nil
	}
	failed = append(failed, unanswered...)
	// Not ours: undo whatever was granted, on every node that may hold it
	// (a node that answered with another holder's lease holds nothing of
	// ours). A failed attempt under contention then costs no extra calls.
	if len(won) > 0 || len(failed) > 0 {
		skip := make([]bool, len(b.nodes))
		for _, r := range held {
			skip[r.i] = true
		}
		b.releaseExcept(ctx, n, token, skip)
	}
	if len(held) > 0 && len(failed) <= len(b.nodes)-b.quorum {
		// Contention, or a split vote: retry after the holder's expiry or
		// a short random delay, whichever comes first.
		wait := 10*time.Millisecond + jitter(50*time.Millisecond)
		for _, r := range held {
			if r.acq.holderTTL >= 0 && r.acq.holderTTL < wait {
				wait = r.acq.holderTTL
			}
		}
		return acquireResult{holderTTL: wait}, nil
	}
	if len(won) >= b.quorum { // validity ran out
		return acquireResult{}, fmt.Errorf("core: redlock acquire took %v of a %v ttl: no validity left", time.Since(start), ttl)
	}
	return acquireResult{}, b.quorumError("acquire", len(won), failed)
}

// settleFence returns the highest fence the winners saw, first raising a
// majority of counters to it when fewer than a majority are there already.
func (b *redlockBackend) settleFence(ctx context.Context, n names, won []nodeReply, ttl time.Duration) (int64, error) {
	var fence int64
	for _, r := range won {
		fence = max(fence, r.acq.fence)
	}
	at := 0
	for _, r := range won {
		if r.acq.fence == fence {
			at++
		}
	}
	if at >= b.quorum {
		return fence, nil
	}
	acks := 0
	var failed []nodeReply
	unanswered := b.fanout(ctx, nodeTimeout(ttl), func(ctx context.Context, i int) nodeReply {
		err := fenceMaxScript.Run(ctx, b.nodes[i].rdb, []string{n.fence}, fmt.Sprint(fence), retentionArg).Err()
		return nodeReply{err: err}
	}, func(r nodeReply) bool {
		if r.err == nil {
			acks++
		} else {
			failed = append(failed, r)
		}
		return acks >= b.quorum
	})
	if acks < b.quorum {
		failed = append(failed, unanswered...)
		return 0, b.quorumError("fence write-back", acks, failed)
	}
	return fence, nil
}

// track registers the acquire calls of token in flight.
func (b *redlockBackend) track(token string) *sync.WaitGroup {
	wg := new(sync.WaitGroup)
	b.mu.Lock()
	if b.inflight == nil {
		b.inflight = make(map[string]*sync.WaitGroup)
	}
	b.inflight[token] = wg
	b.mu.Unlock()
	return wg
}

// untrack forgets them once they are all done, without blocking.
func (b *redlockBackend) untrack(token string, wg *sync.WaitGroup) {
	forget := func() {
		wg.Wait()
		b.mu.Lock()
		if b.inflight[token] == wg {
			delete(b.inflight, token)
		}
		b.mu.Unlock()
	}
	if !b.spawn(forget) {
		forget()
	}
}

// settle waits for token's acquire calls still in flight (each is bounded
// by its node timeout), so a release cannot be overtaken by one of them.
func (b *redlockBackend) settle(token string) {
	b.mu.Lock()
	wg := b.inflight[token]
	b.mu.Unlock()
	if wg != nil {
		wg.Wait()
	}
}

// releaseAll deletes token's lease on every node and waits (bounded).
func (b *redlockBackend) releaseAll(ctx context.Context, n names, token string) (released int, failed []nodeReply) {
	return b.releaseExcept(ctx, n, token, nil)
}

// releaseExcept is releaseAll that skips the nodes marked in skip: those
// that answered an acquisition with another holder's lease (nothing of
// ours to delete there).
func (b *redlockBackend) releaseExcept(ctx context.Context, n names, token string, skip []bool) (released int, failed []nodeReply) {
	b.settle(token)
	ctx = context.WithoutCancel(ctx)
	nonce := releaseNonce() // one release, one wake-up, however many nodes publish it
	unanswered := b.fanout(ctx, 500*time.Millisecond, func(ctx context.Context, i int) nodeReply {
		if skip != nil && skip[i] {
			return nodeReply{}
		}
		ok, err := b.nodes[i].releaseNonce(ctx, n, token, nonce)
		return nodeReply{ok: ok, err: err}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
		} else if r.ok {
			released++
		}
		return false
	})
	return released, append(failed, unanswered...)
}

// release reports the lease released when a majority of nodes held it. A
// minority means it had expired or been taken over (ErrNotHeld) — unless
// the nodes that failed to answer could have made up the majority, which
// is a QuorumError.
func (b *redlockBackend) release(ctx context.Context, n names, token string) (bool, error) {
	released, failed := b.releaseAll(ctx, n, token)
	if released >= b.quorum {
		return true, nil
	}
	if released+len(failed) >= b.quorum {
		return false, b.quorumError("release", released, failed)
	}
	return false, nil
}

func (b *redlockBackend) extend(ctx context.Context, reqs []extendReq) {
	start := time.Now()
	perNode := make([][]extendReq, len(b.nodes))
	var minTTL time.Duration
	for i := range perNode {
		perNode[i] = append([]extendReq(nil), reqs...)
	}
	for _, r := range reqs {
		if minTTL == 0 || r.ttl < minTTL {
			minTTL = r.ttl
		}
	}
	replied := make([]bool, len(b.nodes))
	b.fanout(ctx, nodeTimeout(minTTL), func(ctx context.Context, i int) nodeReply {
		b.nodes[i].extend(ctx, perNode[i])
		return nodeReply{}
	}, func(r nodeReply) bool {
		replied[r.i] = true
		return false
	})
	elapsed := time.Since(start)
	for k := range reqs {
		r := &reqs[k]
		var lefts []time.Duration
		var gone []int
		var failed []nodeReply
		for i := range b.nodes {
			if !replied[i] { // its goroutine may still be writing perNode[i]
				failed = append(failed, nodeReply{i: i, err: errors.New("no answer in time")})
				continue
			}
			nr := perNode[i][k]
			switch {
			case nr.err != nil:
				failed = append(failed, nodeReply{i: i, err: nr.err})
			case nr.ok:
				lefts = append(lefts, nr.left)
			case nr.gone:
				gone = append(gone, i)
			}
		}
		ok := len(lefts)
		switch {
		case ok >= b.quorum && elapsed < r.ttl-drift(r.ttl):
			// The lease stands while a majority holds it: until the
			// quorum-th longest of the confirmed expiries.
			slices.Sort(lefts)
			r.ok, r.left, r.heal = true, lefts[ok-b.quorum], gone
		case ok+len(failed) >= b.quorum && len(failed) > 0:
			r.err = b.quorumError("extend", ok, failed)
		default:
			r.gone = ok == 0
		}
	}
}

// heal re-creates a renewed lease on nodes that lost it (restarted empty),
// only where the key is free. The Client calls it only while the lease is
// not released and holds the release back until heal returns (see
// Client.heal), so heal waits for every call it sent, even one whose
// context ended: a command already on the wire still lands.
func (b *redlockBackend) heal(ctx context.Context, n names, token string, ttl time.Duration, nodes []int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeTimeout(ttl))
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.nodes[i].rdb.SetNX(ctx, n.lease, token, ttl)
		}()
	}
	wg.Wait()
}

func (b *redlockBackend) inspect(ctx context.Context, n names) (Info, error) {
	infos := make([]Info, len(b.nodes))
	var failed []nodeReply
	answered := 0
	results := make([]Info, len(b.nodes))
	unanswered := b.fanout(ctx, time.Second, func(ctx context.Context, i int) nodeReply {
		info, err := b.nodes[i].inspect(ctx, n)
		results[i] = info // read below only for nodes that answered
		return nodeReply{err: err}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
		} else {
			answered++
			infos[r.i] = results[r.i]
		}
		return false
	})
	if answered < b.quorum {
		return Info{}, b.quorumError("inspect", answered, append(failed, unanswered...))
	}
	var out Info
	count := map[string]int{}
	for _, info := range infos {
		out.Fence = max(out.Fence, info.Fence)
		if info.Held {
			count[info.Token]++
		}
	}
	for _, info := range infos {
		if info.Held && count[info.Token] >= b.quorum {
			if !out.Held || info.TTL < out.TTL {
				out.Held, out.Token, out.Metadata, out.TTL = true, info.Token, info.Metadata, info.TTL
			}
		}
	}
	return out, nil
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
	b.closed = true
	b.mu.Unlock()
	for _, nd := range b.nodes {
		nd.close()
	}
	b.wg.Wait()
}

func (b *redlockBackend) setRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	acks := 0
	var failed []nodeReply
	unanswered := b.fanout(ctx, time.Second, func(ctx context.Context, i int) nodeReply {
		return nodeReply{err: b.nodes[i].setRecord(ctx, key, value, ttl)}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
		} else {
			acks++
		}
		return false
	})
	if acks < b.quorum {
		return b.quorumError("record", acks, append(failed, unanswered...))
	}
	return nil
}

func (b *redlockBackend) getRecord(ctx context.Context, key string) (string, bool, error) {
	count := map[string]int{}
	answered := 0
	var failed []nodeReply
	unanswered := b.fanout(ctx, time.Second, func(ctx context.Context, i int) nodeReply {
		v, ok, err := b.nodes[i].getRecord(ctx, key)
		return nodeReply{v: v, ok: ok, err: err}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
			return false
		}
		answered++
		if r.ok {
			count[r.v]++
		}
		return false
	})
	if answered < b.quorum {
		return "", false, b.quorumError("record", answered, append(failed, unanswered...))
	}
	best, n := "", 0
	for v, k := range count {
		if k > n || k == n && v > best {
			best, n = v, k
		}
	}
	return best, n > 0, nil
}

// unclaimScript deletes a claim only if it still holds our value.
var unclaimScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (b *redlockBackend) claimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	var won []int
	var failed []nodeReply
	unanswered := b.fanout(ctx, nodeTimeout(ttl), func(ctx context.Context, i int) nodeReply {
		ok, err := b.nodes[i].claimRecord(ctx, key, value, ttl)
		return nodeReply{ok: ok, err: err}
	}, func(r nodeReply) bool {
		switch {
		case r.err != nil:
			failed = append(failed, r)
		case r.ok:
			won = append(won, r.i)
		}
		return false
	})
	if len(won) >= b.quorum {
		return true, nil
	}
	for _, i := range won { // give back a minority claim
		unclaimScript.Run(context.WithoutCancel(ctx), b.nodes[i].rdb, []string{key}, value)
	}
	failed = append(failed, unanswered...)
	if len(failed) > len(b.nodes)-b.quorum {
		return false, b.quorumError("claim", len(won), failed)
	}
	return false, nil
}

// claimRecordWithin claims on every node, each judging lateness by its own
// TIME; the claim is ours with a majority, and a minority claim is given
// back as in claimRecord. Without a majority the verdict is late when more
// nodes found the claim late than taken, taken otherwise.
func (b *redlockBackend) claimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, plannedMs, windowMs int64) (verdict, error) {
	var won []int
	var failed []nodeReply
	nTaken, nLate := 0, 0
	unanswered := b.fanout(ctx, nodeTimeout(ttl), func(ctx context.Context, i int) nodeReply {
		v, err := b.nodes[i].claimRecordWithin(ctx, key, value, ttl, plannedMs, windowMs)
		return nodeReply{ok: v == verdictClaimed, v: v.String(), err: err}
	}, func(r nodeReply) bool {
		switch {
		case r.err != nil:
			failed = append(failed, r)
		case r.ok:
			won = append(won, r.i)
		case r.v == verdictLate.String():
			nLate++
		default:
			nTaken++
		}
		return false
	})
	if len(won) >= b.quorum {
		return verdictClaimed, nil
	}
	for _, i := range won { // give back a minority claim
		unclaimScript.Run(context.WithoutCancel(ctx), b.nodes[i].rdb, []string{key}, value)
	}
	failed = append(failed, unanswered...)
	if len(failed) > len(b.nodes)-b.quorum {
		return 0, b.quorumError("claim", len(won), failed)
	}
	if nLate > nTaken {
		return verdictLate, nil
	}
	return verdictTaken, nil
}

// setRecordNewer runs the conditional write on every node, each deciding
// for itself; stored is true when a majority stored.
func (b *redlockBackend) setRecordNewer(ctx context.Context, key, ordKey, value string, order int64, ttl time.Duration) (bool, error) {
	stored, answered := 0, 0
	var failed []nodeReply
	unanswered := b.fanout(ctx, time.Second, func(ctx context.Context, i int) nodeReply {
		ok, err := b.nodes[i].setRecordNewer(ctx, key, ordKey, value, order, ttl)
		return nodeReply{ok: ok, err: err}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
			return false
		}
		answered++
		if r.ok {
			stored++
		}
		return false
	})
	if answered < b.quorum {
		return false, b.quorumError("record", answered, append(failed, unanswered...))
	}
	return stored >= b.quorum, nil
}
