package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestRedlockMiniredisConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T) *core.Client {
		var nodes []redis.UniversalClient
		for i := 0; i < 3; i++ {
			_, rdb := startMiniredis(t)
			nodes = append(nodes, rdb)
		}
		c := mustNew(core.NewRedlock(nodes))
		warmUp(t, c)
		return c
	})
}

// warmUp dials the nodes and loads the scripts, so that the suite's short
// TTLs are not spent on a cold start (miniredis runs Lua slowly under -race).
func warmUp(t *testing.T, c *core.Client) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		l, err := c.TryLock(ctx, "warm-up", core.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("warm-up: %v", err)
		}
		l.Extend(ctx, 10*time.Second)
		l.Release(ctx)
	}
}

// fiveNodes starts five redis-server processes.
func fiveNodes(t *testing.T) ([]*redistest.Server, []redis.UniversalClient) {
	var srvs []*redistest.Server
	var nodes []redis.UniversalClient
	for i := 0; i < 5; i++ {
		s := redistest.StartServer(t)
		srvs = append(srvs, s)
		nodes = append(nodes, s.Client(t))
	}
	return srvs, nodes
}

func TestRedlockConformance(t *testing.T) {
	_, nodes := fiveNodes(t)
	locktest.Run(t, func(t *testing.T) *core.Client {
		c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(testPrefix())))
		warmUp(t, c)
		return c
	})
}

func TestRedlockNodeLoss(t *testing.T) {
	srvs, nodes := fiveNodes(t)
	c := mustNew(core.NewRedlock(nodes))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	first, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	first.Release(ctx)

	srvs[0].Kill(t)
	srvs[1].Kill(t)
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("with 3 of 5 nodes up: %v", err)
	}
	if l.Fence() <= first.Fence() {
		t.Fatalf("fence %d not above %d", l.Fence(), first.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release with 3 of 5 nodes: %v", err)
	}

	srvs[2].Kill(t)
	_, err = c.TryLock(ctx, "k")
	var qe *core.QuorumError
	if !errors.As(err, &qe) || errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("with 2 of 5 nodes up: got %v, want a QuorumError", err)
	}
	for _, s := range srvs[:3] {
		if !strings.Contains(err.Error(), s.Addr()) {
			t.Fatalf("error does not name dead node %s: %v", s.Addr(), err)
		}
	}
	_, err = c.Lock(ctx, "k", core.WithWaitTimeout(10*time.Second))
	if !errors.As(err, &qe) {
		t.Fatalf("Lock with 2 of 5 nodes up: got %v, want a QuorumError at once", err)
	}
}

// A node restarted empty mid-hold is healed by the next renewal — with the
// lease's metadata, which Inspect (and so Observe) may read from it — and
// the fence keeps rising.
func TestRedlockNodeRestartHealed(t *testing.T) {
	srvs, nodes := fiveNodes(t)
	c := mustNew(core.NewRedlock(nodes))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)

	l, err := c.TryLock(ctx, "k", core.WithTTL(600*time.Millisecond), core.WithMetadata("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	srvs[3].Kill(t)
	srvs[3].Restart(t)
	srvs[4].Kill(t)
	srvs[4].Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n3, _ := nodes[3].Exists(ctx, "latchkey:{k}").Result()
		n4, _ := nodes[4].Exists(ctx, "latchkey:{k}").Result()
		if n3 == 1 && n4 == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("renewal did not re-create the lease on the restarted nodes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, i := range []int{3, 4} {
		if v, _ := nodes[i].Get(ctx, "latchkey:{k}").Result(); v != l.Token()+"|node-a" {
			t.Errorf("node %d healed with %q, want the token and the metadata", i, v)
		}
	}
	select {
	case <-l.Lost():
		t.Fatalf("lease lost: %v", l.Err())
	default:
	}
	l.Release(ctx)
	next, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Fence() <= l.Fence() {
		t.Fatalf("fence %d after restarts not above %d", next.Fence(), l.Fence())
	}
}

// A node whose clock jumps forward expires the lease early there; the
// majority still holds it, renewal heals it.
func TestRedlockClockJump(t *testing.T) {
	var mrs []*miniredis.Miniredis
	var nodes []redis.UniversalClient
	for i := 0; i < 3; i++ {
		mr := miniredis.RunT(t)
		stop := mrclock.Run(mr)
		t.Cleanup(stop)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rdb.Close() })
		mrs, nodes = append(mrs, mr), append(nodes, rdb)
	}
	c := mustNew(core.NewRedlock(nodes))
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k", core.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// TryLock returns once a majority answered: the third node's write may
	// still be on its way, and the test needs the lease on all three.
	for wait := time.Now().Add(5 * time.Second); !(mrs[0].Exists("latchkey:{k}") && mrs[1].Exists("latchkey:{k}") && mrs[2].Exists("latchkey:{k}")); {
		if time.Now().After(wait) {
			t.Fatal("the lease did not reach every node")
		}
		time.Sleep(time.Millisecond)
	}
	mrs[0].FastForward(time.Hour)
	if mrs[0].Exists("latchkey:{k}") {
		t.Fatal("clock jump did not expire the lease on node 0")
	}
	other, err := c.TryLock(ctx, "k")
	if !errors.Is(err, core.ErrNotAcquired) {
		if other != nil {
			other.Release(ctx)
		}
		t.Fatalf("with the lease on 2 of 3 nodes another client got %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !mrs[0].Exists("latchkey:{k}") {
		if time.Now().After(deadline) {
			t.Fatal("renewal did not heal the jumped node")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Release(ctx)
}
