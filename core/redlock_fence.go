package core

import (
	"context"
	_ "embed"
	"strconv"
	"sync/atomic"
	"time"
)

// Redlock's fence: each node's counter, the client's proposal that makes
// the nodes agree, and the write-back when they do not.

var (
	//go:embed scripts/redlock_acquire.lua
	redlockAcquireLua string

	redlockAcquireScript = newLuaScript(redlockAcquireLua, libOwns, libFence)
)

// fenceLead is how far ahead of its own clock a Redlock client proposes the
// fence of an acquisition. A node whose counter is below the proposal (a
// fresh key, an expired counter, a server restarted, or simply the clock
// having moved on since the last acquisition) takes the proposal when that
// is above its own clock, by at most FENCE_LEAD_MAX (200 ms,
// lib_fence.lua), else its clock; a counter above both counts on by one, as
// on a single server. So the nodes whose clocks are within about 100 ms of
// the client's (less the time the request takes to reach them) all return
// the proposal, the client finds a majority agreeing and writes nothing
// back (settleFence). Nodes further off take their own clocks and the
// write-back settles them, as before.
//
// What this costs the restart argument of lib_fence.lua (after a restart
// that lost a counter or brought back a stale one, the server clock is
// above every fence handed out before): a fence may stand up to 200 ms
// above its server's clock, where it would otherwise be the clock (and a
// write-back could raise a counter by the skew to other nodes' clocks). A
// fence after a restart is at least the server's clock and the capped
// proposal of its acquisition. So a fence can fail to rise only if a
// majority restarts within 200 ms (plus that skew, plus a µs per
// acquisition since) of the fences it lost, and the next client's clock is
// behind the one that proposed them by more than the time in between. A
// client's clock, however far off, sets no counter more than 200 ms ahead
// of its server's.
const fenceLead = 100 * time.Millisecond

// fenceProposal is the fence a Redlock acquisition proposes to every node:
// the client's clock in microseconds plus fenceLead.
func fenceProposal() string {
	return strconv.FormatInt(time.Now().Add(fenceLead+time.Duration(clockSkew.Load())).UnixMicro(), 10)
}

// clockSkew is added to the client's clock by fenceProposal: zero, except
// in tests of a client whose clock is off.
var clockSkew atomic.Int64

// acquireProposed is one node's part of a Redlock acquisition: acquire
// without the fair queue, proposing the fence.
func (b *redisBackend) acquireProposed(ctx context.Context, n names, token, value string, ttl time.Duration, proposal string) (acquireResult, error) {
	keys := []string{n.lease, n.fence}
	args := []any{token, value, ttl.Milliseconds(), retentionFor(ttl), proposal}
	if b.ackN > 0 {
		return b.acquireAcked(ctx, n, token, redlockAcquireScript, keys, args)
	}
	v, err := redlockAcquireScript.run(ctx, b.hot, keys, args...).Int64Slice()
	if err != nil {
		return acquireResult{}, err
	}
	return parseAcquire(v)
}

// settleFence returns the highest fence the winners saw, first raising a
// majority of counters to it when fewer than a majority are there already.
//
// Why the write-back may be skipped when a majority returned the highest
// fence F, and only then: a node's script leaves its counter at the fence
// it returns, and a counter only rises until it expires or its server
// restarts empty (then it is seeded above the fences handed out: the
// restart argument above). So F is on a majority of counters, as the
// write-back would leave it. An acquisition that starts after this one
// returned wins a majority too, which shares a node with that majority;
// its script there runs later and returns more than F, so its fence, the
// highest of its winners', is above F. If fewer than a majority returned F,
// a later majority might miss every node at F: then F is written back to
// a majority first. Proposals only decide the seeds; the rule compares
// what the nodes returned, whatever their clocks.
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
	arg := strconv.FormatInt(fence, 10)
	unanswered := b.fanout(ctx, nodeTimeout(ttl), func(ctx context.Context, i int) nodeReply {
		err := fenceMaxScript.Run(ctx, b.nodes[i].rdb, []string{n.fence}, arg, retentionFor(ttl)).Err()
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
