package core_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// An uncontended Redlock acquisition on a fresh key settles its fence in
// one round: every node seeds its counter from the fence the client
// proposed to all of them, they agree, and nothing is written back.
func TestRedlockFreshKeysNoWriteBack(t *testing.T) {
	run := func(t *testing.T, nodes []redis.UniversalClient) {
		hooks := make([]*shaCounter, len(nodes))
		for i, rdb := range nodes {
			hooks[i] = &shaCounter{n: map[string]int{}}
			rdb.AddHook(hooks[i])
		}
		c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(testPrefix())))
		defer c.Close()
		warmUp(t, c)
		ctx := ctxFor(t, 30*time.Second)
		for _, h := range hooks {
			h.take()
		}
		const cycles = 20
		for i := range cycles {
			l, err := c.TryLock(ctx, fmt.Sprintf("fresh-%d", i), core.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		c.Close() // waits for the calls still under way
		for i, h := range hooks {
			n := h.take()
			if wb := n[core.FenceMaxHash]; wb > 0 {
				t.Errorf("node %d: %d fence write-backs in %d acquisitions of fresh keys, want none", i, wb, cycles)
			}
			total := 0
			for _, v := range n {
				total += v
			}
			t.Logf("node %d: %d scripts in %d cycles", i, total, cycles)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		var nodes []redis.UniversalClient
		for range 3 {
			_, rdb := startMiniredis(t)
			nodes = append(nodes, rdb)
		}
		run(t, nodes)
	})
	t.Run("redis-server", func(t *testing.T) {
		_, nodes := fiveNodes(t)
		run(t, nodes)
	})
}

// Fences strictly rise, one acquisition after another, whatever the nodes'
// counters and clocks and the client's clock say: agreeing nodes skip the
// write-back, disagreeing ones get it.
func TestRedlockFenceRisesWhenNodesDisagree(t *testing.T) {
	hour := time.Hour.Microseconds()
	cases := []struct {
		name  string
		setup func(t *testing.T, mrs []*miniredis.Miniredis, counter string)
	}{
		{"agreeing", func(*testing.T, []*miniredis.Miniredis, string) {}},
		{"one counter an hour ahead", func(t *testing.T, mrs []*miniredis.Miniredis, counter string) {
			mrs[0].Set(counter, strconv.FormatInt(time.Now().UnixMicro()+hour, 10))
		}},
		{"counters apart", func(t *testing.T, mrs []*miniredis.Miniredis, counter string) {
			now := time.Now().UnixMicro()
			for i, mr := range mrs {
				mr.Set(counter, strconv.FormatInt(now+int64(i-2)*hour/4, 10))
			}
		}},
		{"one clock an hour ahead", func(t *testing.T, mrs []*miniredis.Miniredis, _ string) {
			mrs[0].SetTime(time.Now().Add(time.Hour))
		}},
		{"two clocks an hour behind", func(t *testing.T, mrs []*miniredis.Miniredis, _ string) {
			mrs[3].SetTime(time.Now().Add(-time.Hour))
			mrs[4].SetTime(time.Now().Add(-time.Hour))
		}},
		{"client clock an hour behind", func(t *testing.T, _ []*miniredis.Miniredis, _ string) {
			t.Cleanup(core.SetClockSkew(-time.Hour))
		}},
		{"client clock an hour ahead", func(t *testing.T, _ []*miniredis.Miniredis, _ string) {
			t.Cleanup(core.SetClockSkew(time.Hour))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mrs, nodes, _ := switchedNodes(t, 5)
			prefix := testPrefix()
			counter := prefix + ":{k}:fence"
			c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
			defer c.Close()
			warmUp(t, c)
			tc.setup(t, mrs, counter)
			ctx := ctxFor(t, 30*time.Second)
			var last int64
			for i := range 30 {
				if i == 15 { // node 1 restarts empty
					mrs[1].Del(counter)
				}
				l, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if l.Fence() <= last {
					t.Errorf("acquisition %d: fence %d not above the previous %d", i, l.Fence(), last)
				}
				last = l.Fence()
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Two acquisitions whose majorities share one node: the first on nodes 0,
// 1, 2, which agree (no write-back); the second on nodes 2, 3, 4, where 3
// and 4 have clocks an hour behind and the client's clock is an hour behind
// too. Only node 2 carries the first fence, and the second is still above it.
func TestRedlockFenceTwoMajorities(t *testing.T) {
	mrs, nodes, down := switchedNodes(t, 5)
	prefix := testPrefix()
	hooks := make([]*shaCounter, len(nodes))
	for i, rdb := range nodes {
		hooks[i] = &shaCounter{n: map[string]int{}}
		rdb.AddHook(hooks[i])
	}
	c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
	defer c.Close()
	warmUp(t, c)
	ctx := ctxFor(t, 30*time.Second)
	mrs[3].SetTime(time.Now().Add(-time.Hour))
	mrs[4].SetTime(time.Now().Add(-time.Hour))

	down[3].Store(true)
	down[4].Store(true)
	a, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, h := range hooks {
		if wb := h.take()[core.FenceMaxHash]; wb > 0 {
			t.Errorf("first acquisition wrote the fence back to node %d; nodes 0-2 should have agreed", i)
		}
	}

	down[3].Store(false)
	down[4].Store(false)
	down[0].Store(true)
	down[1].Store(true)
	defer core.SetClockSkew(-time.Hour)()
	b, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("fence %d on nodes 2-4 not above %d on nodes 0-2", b.Fence(), a.Fence())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A client whose clock runs an hour ahead cannot seed a fence counter an
// hour ahead: a node takes a proposal only up to 200 ms above its own clock.
func TestRedlockProposalBounded(t *testing.T) {
	var nodes []redis.UniversalClient
	for range 3 {
		_, rdb := startMiniredis(t)
		nodes = append(nodes, rdb)
	}
	c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(testPrefix())))
	defer c.Close()
	warmUp(t, c)
	defer core.SetClockSkew(time.Hour)()
	ctx := ctxFor(t, 30*time.Second)
	l, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if limit := time.Now().Add(time.Second).UnixMicro(); l.Fence() > limit {
		t.Errorf("fence %d is %v ahead of the nodes' clocks; want at most about 200 ms", l.Fence(), time.Duration(l.Fence()-time.Now().UnixMicro())*time.Microsecond)
	}
}

// A fence Redlock writes back to a node whose clock is behind it (the
// nodes disagreed) keeps that node's counter alive until the node's clock
// has passed it and the retention beyond, as a counter that next_fence set
// ahead of its clock does: when it expired after the retention alone, a
// majority without the node whose clock is right seeded a fence from the
// slow clocks, below the one written back (about 54 minutes below here;
// found by a review of e1d6f5c). Two of three nodes run an hour behind.
func TestRedlockWriteBackOutlivesItsLead(t *testing.T) {
	mrs, nodes, down := switchedNodes(t, 3)
	prefix := testPrefix()
	c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix), core.WithAutoRenew(false)))
	defer c.Close()
	warmUp(t, c)
	now := time.Now()
	behind := now.Add(-time.Hour)
	mrs[0].SetTime(now)
	mrs[1].SetTime(behind)
	mrs[2].SetTime(behind)
	ctx := ctxFor(t, 30*time.Second)
	cycle := func(off int) int64 {
		down[off].Store(true)
		defer down[off].Store(false)
		l, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Fence()
	}

	// Nodes 0 and 1: node 0's fence is the proposal, node 1's its own
	// clock's; the higher is written back to both.
	first := cycle(2)
	counter := prefix + ":{k}:fence"
	t.Logf("fence %d; node 1's counter %v, %v to live", first, mustGet(t, mrs[1], counter), mrs[1].TTL(counter))

	// Idle for longer than the retention.
	gap := fenceRetention + time.Minute
	for _, mr := range mrs {
		mr.FastForward(gap)
	}
	mrs[0].SetTime(now.Add(gap))
	mrs[1].SetTime(behind.Add(gap))
	mrs[2].SetTime(behind.Add(gap))
	defer core.SetClockSkew(gap)()

	// Nodes 1 and 2: node 1's counter must still stand at the fence
	// written back to it.
	if next := cycle(0); next <= first {
		t.Errorf("fence %d after %d: fell by %v after an idle gap of %v", next, first, time.Duration(first-next)*time.Microsecond, gap)
	}
}

// mustGet returns key's value in mr, or why there is none.
func mustGet(t *testing.T, mr *miniredis.Miniredis, key string) string {
	t.Helper()
	v, err := mr.Get(key)
	if err != nil {
		return "none (" + err.Error() + ")"
	}
	return v
}

// switchedNodes starts n miniredis nodes whose clients fail every call
// while their switch is on, as if the node were down.
func switchedNodes(t *testing.T, n int) ([]*miniredis.Miniredis, []redis.UniversalClient, []*atomic.Bool) {
	t.Helper()
	var mrs []*miniredis.Miniredis
	var nodes []redis.UniversalClient
	var down []*atomic.Bool
	for range n {
		mr, rdb := startMiniredis(t)
		sw := &nodeSwitch{}
		rdb.AddHook(sw)
		mrs, nodes, down = append(mrs, mr), append(nodes, rdb), append(down, &sw.down)
	}
	return mrs, nodes, down
}

var errNodeDown = errors.New("node switched off by the test")

// nodeSwitch fails every call of a client while down is set.
type nodeSwitch struct{ down atomic.Bool }

func (s *nodeSwitch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *nodeSwitch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s.down.Load() {
			cmd.SetErr(errNodeDown)
			return errNodeDown
		}
		return next(ctx, cmd)
	}
}

func (s *nodeSwitch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if s.down.Load() {
			for _, c := range cmds {
				c.SetErr(errNodeDown)
			}
			return errNodeDown
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*nodeSwitch)(nil)
