package core_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// handOff holds key with holder, starts waiter's Lock on it, waits until
// that waiter waits (its mark, or its place in the queue), and releases
// with the nodes' command counts reset. It returns how long after the
// release the waiter had the lock, and the commands each node executed.
func handOff(ctx context.Context, t *testing.T, rdb redis.UniversalClient, prefix string, holder, waiter *core.Client, key string, fair bool, nodes []*redis.Client) (time.Duration, []map[string]int64) {
	t.Helper()
	var lo []core.LockOption
	if fair {
		lo = append(lo, core.WithFair())
	}
	h, err := holder.TryLock(ctx, key, append(lo, core.WithTTL(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	got := waitWoken(ctx, t, waiter, key, lo...)
	if fair {
		waitQueueLen(ctx, t, rdb, prefix, key, 1)
	} else {
		waitExists(ctx, t, rdb, prefix+":{"+key+"}:w:m")
	}
	time.Sleep(20 * time.Millisecond) // its subscription confirmed
	d, _ := releaseToWaiter(ctx, t, h, got, nodes)
	per := make([]map[string]int64, len(nodes))
	for i, n := range nodes {
		per[i] = executed(t, []*redis.Client{n})
	}
	return d, per
}

func waitExists(ctx context.Context, t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := rdb.Exists(ctx, key).Result(); n == 0; n, _ = rdb.Exists(ctx, key).Result() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShardedNotifyStaysInSlot: on a Cluster a release's notification and
// a grant are published with SPUBLISH on the key's own master, and nowhere
// else — no PUBLISH, which the cluster bus carries to every node — and
// they wake the waiter, with WithShardedNotify(true); the default keeps
// classic PUBLISH.
// Keys over all three masters, in the default mode and WithFair.
func TestShardedNotifyStaysInSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master Cluster (not in -short)")
	}
	unfairOnly(t)
	cl, nodes := startCluster3(t)
	rdb := cl.Client(t)
	for _, tc := range []struct {
		name    string
		opts    []core.Option
		sharded bool
	}{
		{"sharded", []core.Option{core.WithShardedNotify(true)}, true},
		{"classic", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			prefix := testPrefix()
			opts := append([]core.Option{core.WithKeyPrefix(prefix)}, tc.opts...)
			holder := mustNew(core.NewRedis(cl.Client(t), opts...))
			defer holder.Close()
			waiter := mustNew(core.NewRedis(cl.Client(t), opts...))
			defer waiter.Close()
			owners := map[int]bool{}
			for i := range 6 {
				key := "s" + strconv.Itoa(i)
				owner := ownerOf(ctx, t, nodes, prefix+":{"+key+"}")
				owners[owner] = true
				for _, fair := range []bool{false, true} {
					what := fmt.Sprintf("key %s (master %d), fair %v", key, owner, fair)
					d, per := handOff(ctx, t, rdb, prefix, holder, waiter, key, fair, nodes)
					if d > wokenWithin {
						t.Errorf("%s: the waiter had the lock %v after the release: not woken by it", what, d)
					}
					for i, calls := range per {
						pub, spub := calls["publish"], calls["spublish"]
						switch {
						case tc.sharded && pub != 0:
							t.Errorf("%s: master %d ran PUBLISH %d times", what, i, pub)
						case tc.sharded && i != owner && spub != 0:
							t.Errorf("%s: master %d, not the key's, ran SPUBLISH %d times", what, i, spub)
						case tc.sharded && i == owner && spub == 0:
							t.Errorf("%s: the key's master ran no SPUBLISH: %v", what, calls)
						case !tc.sharded && spub != 0:
							t.Errorf("%s: classic, master %d ran SPUBLISH %d times", what, i, spub)
						case !tc.sharded && i == owner && pub == 0:
							t.Errorf("%s: classic, the key's master ran no PUBLISH: %v", what, calls)
						}
					}
				}
			}
			if len(owners) != 3 {
				t.Errorf("the keys covered masters %v, want all three", owners)
			}
		})
	}
}

// ownerOf returns the index of the node that serves key's slot.
func ownerOf(ctx context.Context, t *testing.T, nodes []*redis.Client, key string) int {
	t.Helper()
	slot, err := nodes[0].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		s, err := n.ClusterNodes(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if servesSlot(s, int(slot)) {
			return i
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return -1
}

// servesSlot reports whether the "myself" line of CLUSTER NODES output
// lists slot among its ranges.
func servesSlot(nodesOut string, slot int) bool {
	for _, line := range strings.Split(nodesOut, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi := r, r
			if i := strings.IndexByte(r, '-'); i >= 0 {
				lo, hi = r[:i], r[i+1:]
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				return true
			}
		}
	}
	return false
}

// TestShardedNotifyFallsBack: WithShardedNotify(true) on a server without
// sharded pub/sub (miniredis has no SPUBLISH or SSUBSCRIBE, as Redis
// before 7) falls back to classic pub/sub, and releases still wake their
// waiters; on a standalone Redis 7 it publishes with SPUBLISH alone.
func TestShardedNotifyFallsBack(t *testing.T) {
	unfairOnly(t)
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		shardedHandOffs(t, rdb, nil)
	})
	t.Run("server", func(t *testing.T) {
		srv := redistest.StartServer(t)
		shardedHandOffs(t, srv.Client(t), []*redis.Client{srv.Client(t)})
	})
}

// shardedHandOffs hands a key over twice (default mode, then WithFair)
// between two Clients WithShardedNotify(true) on rdb; with nodes, it
// checks that only SPUBLISH was used.
func shardedHandOffs(t *testing.T, rdb redis.UniversalClient, nodes []*redis.Client) {
	ctx := ctxFor(t, time.Minute)
	prefix := testPrefix()
	holder := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithShardedNotify(true)))
	defer holder.Close()
	waiter := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithShardedNotify(true)))
	defer waiter.Close()
	for _, fair := range []bool{false, true} {
		d, per := handOff(ctx, t, rdb, prefix, holder, waiter, "f", fair, nodes)
		if d > wokenWithin {
			t.Errorf("fair %v: the waiter had the lock %v after the release: not woken by it", fair, d)
		}
		for _, calls := range per {
			if calls["publish"] != 0 || calls["spublish"] == 0 {
				t.Errorf("fair %v: want SPUBLISH alone, ran %v", fair, calls)
			}
		}
	}
	if err := rdb.Del(ctx, prefix+":{f}:fence").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestShardedNotifyFollowsSlotMove: when the key's slot moves to another
// master while a waiter waits, the old master drops the waiter's shard
// subscription (an SUNSUBSCRIBE it did not ask for); the Client subscribes
// it again on the new master, and the release, published there, still
// wakes the waiter.
func TestShardedNotifyFollowsSlotMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master Cluster (not in -short)")
	}
	unfairOnly(t)
	cl, nodes := startCluster3(t)
	ctx := ctxFor(t, time.Minute)
	prefix := testPrefix()
	lease := prefix + ":{m}"
	holder := mustNew(core.NewRedis(cl.Client(t), core.WithKeyPrefix(prefix), core.WithShardedNotify(true)))
	defer holder.Close()
	waiter := mustNew(core.NewRedis(cl.Client(t), core.WithKeyPrefix(prefix), core.WithShardedNotify(true)))
	defer waiter.Close()

	h, err := holder.TryLock(ctx, "m", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := waitWoken(ctx, t, waiter, "m")
	from := ownerOf(ctx, t, nodes, lease)
	to := (from + 1) % len(nodes)
	waitShardSubscribers(ctx, t, nodes[from], lease)

	moveSlot(ctx, t, nodes, lease, from, to)
	waitShardSubscribers(ctx, t, nodes[to], lease)

	if d, _ := releaseToWaiter(ctx, t, h, got, nodes); d > wokenWithin {
		t.Errorf("the waiter had the lock %v after the release on the slot's new master: not woken by it", d)
	}
}

// waitShardSubscribers waits until node has a shard subscriber of channel.
func waitShardSubscribers(ctx context.Context, t *testing.T, node *redis.Client, channel string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := node.PubSubShardNumSub(ctx, channel).Result()
		if err == nil && n[channel] >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no shard subscriber of %s (%v, %v)", node.Options().Addr, channel, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// moveSlot moves the slot of key, with its keys, from nodes[from] to
// nodes[to], the way redis-cli --cluster reshard does, and tells every
// node.
func moveSlot(ctx context.Context, t *testing.T, nodes []*redis.Client, key string, from, to int) {
	t.Helper()
	slot, err := nodes[from].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	id := func(n *redis.Client) string {
		v, err := n.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	src, dst := nodes[from], nodes[to]
	srcID, dstID := id(src), id(dst)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 1000).Result()
	must(err)
	if len(keys) > 0 {
		addr := dst.Options().Addr
		host, port := addr[:strings.LastIndexByte(addr, ':')], addr[strings.LastIndexByte(addr, ':')+1:]
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	for i, n := range nodes {
		if i != from && i != to {
			must(n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
		}
	}
}
