package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
)

// redlockNodes starts n private servers for a Redlock test: the clients a
// Redlock Client uses (through a faultnet proxy each when proxied), the
// direct ones a test reads the nodes with, and the proxies (nil if not).
func redlockNodes(t *testing.T, n int, proxied bool) (rdbs []redis.UniversalClient, direct []*redis.Client, pxs []*faultnet.Proxy) {
	for range n {
		srv := redistest.StartServer(t)
		addr := srv.Addr()
		if proxied {
			px := faultnet.Start(t, srv.Addr())
			pxs, addr = append(pxs, px), px.Addr()
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 2 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		d := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { d.Close() })
		rdbs, direct = append(rdbs, rdb), append(direct, d)
	}
	return rdbs, direct, pxs
}

// A Redlock release must delete the lease on every node it was set on. An
// acquisition returns once a majority won; a slower node still sets the
// lease, and when its script runs more than fenceLead (100 ms) after the
// proposal was made, its counter takes its own clock: above the
// acquisition's fence (the max of the winners only). A release naming that
// fence on every node (769597d, reverted after this review) left the slow
// node's lease until its TTL.
func TestReviewHRedlockSlowNodeLeaseOutlivesRelease(t *testing.T) {
	rdbs, direct, pxs := redlockNodes(t, 3, true)
	c := mustNew(core.NewRedlock(rdbs, core.WithKeyPrefix("hrev")))
	defer c.Close()
	bg := context.Background()
	if w, err := c.TryLock(bg, "warm"); err != nil {
		t.Fatal(err)
	} else if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	names := core.StorageNames("hrev", "k")
	undo := pxs[2].Delay(faultnet.Up, 250*time.Millisecond, 0)
	l, err := c.TryLock(bg, "k", core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acquired, fence %d", l.Fence())
	time.Sleep(600 * time.Millisecond) // node 3's late grant lands
	undo()
	for i, d := range direct {
		v, _ := d.Get(bg, names[0]).Result()
		cnt, _ := d.Get(bg, names[1]).Result()
		t.Logf("node %d before release: lease %q counter %s", i, v, cnt)
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	c.Close() // waits for the release's other deletes
	for i, d := range direct {
		n, _ := d.Exists(bg, names[0]).Result()
		ttl, _ := d.PTTL(bg, names[0]).Result()
		if n != 0 {
			t.Errorf("node %d still holds the released lease (pttl %v) until its TTL", i, ttl)
		}
	}
}

// A healed node keeps the counter an acquisition raised while the lease
// was gone there (a rival's attempt that won that node alone and undid
// itself). After two such episodes, on two of three nodes in turn (each
// time the holder kept a majority, renewed and healed), a release naming
// the acquisition's fence (769597d, reverted) left a majority of nodes
// holding the lease: Release reported ErrNotHeld for a lease it held, and
// the key stayed taken until its TTL.
func TestReviewHRedlockHealedNodesOutliveRelease(t *testing.T) {
	rdbs, direct, _ := redlockNodes(t, 3, false)
	var singles []*core.Client
	for _, d := range direct {
		s := mustNew(core.NewRedis(d, core.WithKeyPrefix("hrevh")))
		defer s.Close()
		singles = append(singles, s)
	}
	c := mustNew(core.NewRedlock(rdbs, core.WithKeyPrefix("hrevh")))
	defer c.Close()
	bg := context.Background()
	names := core.StorageNames("hrevh", "k")
	l, err := c.TryLock(bg, "k", core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// TryLock returns once a majority answered: the third node's write may
	// land later, after the DEL below (seen once on a loaded machine).
	for i, d := range direct {
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if n, _ := d.Exists(bg, names[0]).Result(); n == 1 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("node %d never got the lease", i)
			}
		}
	}
	for _, i := range []int{2, 1} {
		// Node i loses the lease (a partition outlasting its TTL there,
		// simulated by DEL); a rival's attempt wins that node alone
		// meanwhile and undoes itself.
		direct[i].Del(bg, names[0])
		r, err := singles[i].TryLock(bg, "k")
		if err != nil {
			t.Fatalf("rival on node %d: %v", i, err)
		}
		_ = r.Release(bg)
		if err := l.Extend(bg, 30*time.Second); err != nil { // renews at a majority, heals node i
			t.Fatalf("extend: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
		if n, _ := direct[i].Exists(bg, names[0]).Result(); n != 1 {
			t.Fatalf("node %d not healed", i)
		}
	}
	err = l.Release(bg)
	c.Close()
	var left []int
	for i, d := range direct {
		if n, _ := d.Exists(bg, names[0]).Result(); n != 0 {
			left = append(left, i)
		}
	}
	if err != nil || len(left) > 0 {
		t.Errorf("Release of a lease held throughout: %v; nodes still holding it: %v", err, left)
	}
}

// The same without any delay: a client whose clock is 1 s behind the
// nodes' proposes a fence below every node's clock, so each node returns
// its own clock; the node that answers last (outside the majority the
// acquisition returned at) returns the highest, and kept the lease after
// a fenced release (769597d, reverted).
func TestReviewHRedlockSlowClockLeaseOutlivesRelease(t *testing.T) {
	defer core.SetClockSkew(-time.Second)()
	rdbs, direct, _ := redlockNodes(t, 3, false)
	c := mustNew(core.NewRedlock(rdbs, core.WithKeyPrefix("hrevs")))
	defer c.Close()
	bg := context.Background()
	names := core.StorageNames("hrevs", "k")
	stuck := 0
	for range 20 {
		l, err := c.TryLock(bg, "k", core.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		for _, d := range direct {
			if n, _ := d.Exists(bg, names[0]).Result(); n != 0 {
				stuck++
				d.Del(bg, names[0])
			}
		}
	}
	if stuck > 0 {
		t.Errorf("%d of 20 releases left a node holding the lease until its TTL", stuck)
	}
}
