package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Redlock lease operations: acquire (quorum, validity; its fence is in
// redlock_fence.go), release, extend, heal, inspect.

func (b *redlockBackend) acquire(ctx context.Context, n names, token, value string, ttl time.Duration, fair, _ bool) (acquireResult, error) {
	if fair {
		return acquireResult{}, fmt.Errorf("%w: fair mode is not available on Redlock", ErrInvalidOption)
	}
	start := time.Now()
	var won, held, failed []nodeReply
	// Node calls that answer after the outcome is known still set the
	// lease; a release of this token waits for them (track). A release of
	// the token (WithToken) that returned at a majority may still be
	// deleting it on other nodes: each call waits for that node's delete.
	pending, before := b.track(token)
	defer b.untrack(pending)
	var final []nodeReply // under a caller's token: each node's answer, once its call ended
	if n.given {
		final = make([]nodeReply, len(b.nodes))
	}
	proposal := fenceProposal()
	unanswered := b.fanoutTracked(ctx, nodeTimeout(ttl), pending, func(ctx context.Context, i int) nodeReply {
		before.wait(i)
		r, err := b.nodes[i].acquireProposed(ctx, n, token, value, ttl, proposal)
		if final != nil {
			final[i] = nodeReply{acq: r, err: err}
		}
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
			b.undo(ctx, n, token, nil, pending, final)
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
		b.undo(ctx, n, token, skip, pending, final)
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

// undo takes back what a failed acquisition (its node calls: acq) set.
// Under a token of the Client's own, nobody else holds with it: the
// token's lease goes on every node but those marked in skip (see
// releaseExcept). Under a caller's token (WithToken), final holds each
// node's answer once its call ended; a node's lease goes only where the
// node answered with a lease it set (not a re-entry: that lease was there
// before, its holder's), and only if nobody took or re-entered it since,
// by the fence that node returned. A node that never answered may keep
// what the acquisition set there until its TTL: nothing says whose it is.
// So may a node whose counter a fence write-back raised above that fence
// (settleFence failed on the others): deleting by the fence written back
// could delete a re-entry under the token made in between.
func (b *redlockBackend) undo(ctx context.Context, n names, token string, skip []bool, acq *calls, final []nodeReply) {
	if !n.given {
		b.releaseExcept(ctx, n, token, skip, false)
		return
	}
	ctx = context.WithoutCancel(ctx)
	pending, before := b.track(token)
	defer b.untrack(pending)
	nonce := releaseNonce()
	b.fanoutTracked(ctx, 500*time.Millisecond, pending, func(ctx context.Context, i int) nodeReply {
		acq.wait(i) // final[i] is its answer from here on
		before.wait(i)
		r := final[i]
		if r.err != nil || !r.acq.acquired || r.acq.reentered {
			return nodeReply{}
		}
		ok, err := b.nodes[i].releaseNonce(ctx, n, token, nonce, r.acq.fence)
		return nodeReply{ok: ok, err: err}
	}, func(nodeReply) bool { return false })
}

// calls counts one token's node calls still running: an acquisition's, or
// a release's that returned at a majority.
type calls struct {
	b     *redlockBackend
	token string
	nodes []sync.WaitGroup // each node's calls
	left  atomic.Int32     // calls running, plus one until untrack
}

// add counts one more call to node i; done, sent when it ends, undoes that.
func (c *calls) add(i int) {
	c.nodes[i].Add(1)
	c.left.Add(1)
}

func (c *calls) done(i int) {
	c.nodes[i].Done()
	c.drop()
}

// wait waits for the calls to node i (none if c is nil); waitAll for all.
func (c *calls) wait(i int) {
	if c != nil {
		c.nodes[i].Wait()
	}
}

func (c *calls) waitAll() {
	if c != nil {
		for i := range c.nodes {
			c.nodes[i].Wait()
		}
	}
}

// drop forgets the token's entry once nothing is left to wait for.
func (c *calls) drop() {
	if c.left.Add(-1) > 0 {
		return
	}
	c.b.mu.Lock()
	if c.b.inflight[c.token] == c {
		delete(c.b.inflight, c.token)
	}
	c.b.mu.Unlock()
}

// track registers the calls of token about to be sent, and returns those
// sent before and still running (nil if none).
func (b *redlockBackend) track(token string) (c, before *calls) {
	c = &calls{b: b, token: token, nodes: make([]sync.WaitGroup, len(b.nodes))}
	c.left.Store(1)
	b.mu.Lock()
	if b.inflight == nil {
		b.inflight = make(map[string]*calls)
	}
	before = b.inflight[token]
	b.inflight[token] = c
	b.mu.Unlock()
	return c, before
}

// untrack says the operation has returned: the entry goes once its calls
// are done, without blocking.
func (b *redlockBackend) untrack(c *calls) { c.drop() }

// releaseExcept deletes token's lease on every node but those marked in
// skip (if not nil), and waits (bounded). The nodes skipped are those
// that answered an acquisition with another holder's lease (nothing of
// ours to delete there). Each node's delete waits for the token's acquire
// call to that node, so that no late grant follows it. With early set it
// returns once a majority deleted the lease and every acquire call of the
// token has ended; the deletes on the other nodes go on, and an
// acquisition presenting the token again waits for them.
func (b *redlockBackend) releaseExcept(ctx context.Context, n names, token string, skip []bool, early bool) (released int, failed []nodeReply) {
	ctx = context.WithoutCancel(ctx)
	pending, before := b.track(token)
	defer b.untrack(pending)
	nonce := releaseNonce() // one release, one wake-up, however many nodes publish it
	unanswered := b.fanoutTracked(ctx, 500*time.Millisecond, pending, func(ctx context.Context, i int) nodeReply {
		before.wait(i)
		if skip != nil && skip[i] {
			return nodeReply{}
		}
		ok, err := b.nodes[i].releaseNonce(ctx, n, token, nonce, 0) // nodes' counters differ: by token
		return nodeReply{ok: ok, err: err}
	}, func(r nodeReply) bool {
		if r.err != nil {
			failed = append(failed, r)
		} else if r.ok {
			released++
		}
		return early && released >= b.quorum
	})
	if early && released >= b.quorum {
		// The deletes still under way follow their node's grant; no grant
		// may come after the return (it would outlive the release there).
		before.waitAll()
		return released, failed
	}
	return released, append(failed, unanswered...)
}

// release reports the lease released when a majority of nodes held it,
// as soon as a majority deleted it. A minority means it had expired or
// been taken over (ErrNotHeld) — unless the nodes that failed to answer
// could have made up the majority, which is a QuorumError.
func (b *redlockBackend) release(ctx context.Context, n names, token string) (bool, error) {
	released, failed := b.releaseExcept(ctx, n, token, nil, true)
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
func (b *redlockBackend) heal(ctx context.Context, n names, value string, ttl time.Duration, nodes []int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeTimeout(ttl))
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.nodes[i].rdb.SetNX(ctx, n.lease, value, ttl)
		}()
	}
	wg.Wait()
}

// holds: Redlock has no semaphores or read-write locks.
func (b *redlockBackend) holds(context.Context, names, names) (holdsInfo, error) {
	return holdsInfo{}, nil
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
