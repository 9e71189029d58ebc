package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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
	// lease; a release of this token waits for them first.
	pending := b.track(token)
	defer b.untrack(token, pending)
	proposal := fenceProposal()
	unanswered := b.fanoutTracked(ctx, nodeTimeout(ttl), pending, func(ctx context.Context, i int) nodeReply {
		r, err := b.nodes[i].acquireProposed(ctx, n, token, value, ttl, proposal)
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
