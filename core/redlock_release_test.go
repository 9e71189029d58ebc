package core_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// slowReleases makes mr answer the mutex release script (by its SHA1)
// after d.
func slowReleases(mr *miniredis.Miniredis, d time.Duration) {
	mr.Server().SetPreHook(func(_ *server.Peer, cmd string, args ...string) bool {
		if cmd == "EVALSHA" && len(args) > 0 && args[0] == core.ReleaseHash {
			time.Sleep(d)
		}
		return false
	})
}

// heldOnThree returns three miniredis nodes, a Redlock Client on them,
// a lease of "k" it holds on all three (its name lease), and node 2 made
// to answer releases a second late.
func heldOnThree(t *testing.T) ([]*miniredis.Miniredis, *core.Client, *core.Lock, string) {
	t.Helper()
	var mrs []*miniredis.Miniredis
	var nodes []redis.UniversalClient
	for range 3 {
		mr, rdb := startMiniredis(t)
		mrs, nodes = append(mrs, mr), append(nodes, rdb)
	}
	prefix := testPrefix()
	c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { c.Close() })
	warmUp(t, c)
	l, err := c.TryLock(ctxFor(t, 10*time.Second), "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease := prefix + ":{k}"
	waitOnAll(t, mrs, lease)
	slowReleases(mrs[2], time.Second)
	return mrs, c, l, lease
}

// A Redlock release returns once a majority deleted the lease, without
// waiting for a slow node; that node's delete still lands.
func TestRedlockReleaseAtMajority(t *testing.T) {
	mrs, c, l, lease := heldOnThree(t)
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 700*time.Millisecond {
		t.Errorf("Release took %v: it waited for the slow node", took)
	}
	c.Close() // waits for the slow delete
	for i, mr := range mrs {
		if mr.Exists(lease) {
			t.Errorf("node %d still holds the lease after Close", i)
		}
	}
}

// An acquisition presenting a token whose release returned at a majority
// waits, node by node, for that release's late deletes: the slow node ends
// up holding the new lease, not deleted by the old release.
func TestRedlockReacquireAfterEarlyRelease(t *testing.T) {
	mrs, c, l, lease := heldOnThree(t)
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second), core.WithToken(l.Token()))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	waitOnAll(t, mrs, lease)
	time.Sleep(400 * time.Millisecond) // past the slow delete
	for i, mr := range mrs {
		if v, _ := mr.Get(lease); v != l.Token() {
			t.Errorf("node %d holds %q, want the re-acquired lease %q", i, v, l.Token())
		}
	}
}

// waitOnAll waits until every node holds lease (an acquisition returns once
// a majority granted it).
func waitOnAll(t *testing.T, mrs []*miniredis.Miniredis, lease string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, mr := range mrs {
		for !mr.Exists(lease) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not reach every node", lease)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
