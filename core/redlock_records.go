package core

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock records: each node stores, a majority decides.

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

var (
	//go:embed scripts/unclaim.lua
	unclaimLua string
	// unclaimScript deletes a claim only if it still holds our value.
	unclaimScript = redis.NewScript(unclaimLua)
)

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
		unclaimScript.Run(context.WithoutCancel(ctx), b.nodes[i].rdb, []string{key, key + ":c"}, value)
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
		unclaimScript.Run(context.WithoutCancel(ctx), b.nodes[i].rdb, []string{key, key + ":c"}, value)
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
