package core_test

// The Redlock part of the fault-injection suite (see fault_test.go): node
// loss, empty restarts and clock jumps, and the known bugs they exposed.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Redlock over five redis-server processes. Two nodes die mid-run (a
// majority remains: the lock keeps working), one comes back empty (renewal
// heals it, fences keep rising). Then a majority of nodes restarts empty at
// once — more than Redlock tolerates: a second client counts a majority
// while the first still holds, and only the fence stops the first one's
// late write. Finally too few nodes remain: a holder loses its lease and a
// new acquisition fails, each with a QuorumError naming the dead nodes.
func TestFaultRedlockNodes(t *testing.T) {
	faultTest(t)
	var srvs []*redistest.Server
	for range 5 {
		srvs = append(srvs, redistest.StartServer(t))
	}
	r := newFaultRun(t, "redlock nodes")
	mk := func() *core.Client {
		var nodes []redis.UniversalClient
		for _, s := range srvs {
			nodes = append(nodes, faultRedis(t, s.Addr()))
		}
		return r.redlockClient(nodes)
	}
	crew := func(n int) *crew {
		var clients []*core.Client
		for range n {
			clients = append(clients, mk())
		}
		return r.startCrew(clients, 0, r.holdFor(0, 150*time.Millisecond), core.WithTTL(time.Second))
	}
	phase := func(name string, d time.Duration) {
		t.Helper()
		before := r.counts()
		time.Sleep(d)
		after := r.counts()
		t.Logf("redlock nodes: %s: %d acquisitions, %d writes accepted", name, after.acquisitions-before.acquisitions, after.accepted-before.accepted)
		if after.accepted == before.accepted {
			t.Errorf("redlock nodes: %s: no write went through in %v", name, d)
		}
	}

	cr := crew(4)
	phase("five nodes up", time.Second)
	srvs[0].Kill(t)
	srvs[1].Kill(t)
	phase("nodes 0 and 1 dead", time.Second)
	srvs[0].Restart(t)
	phase("node 0 back empty", time.Second)
	cr.stop()

	// A majority (0, 2, 3) restarts empty at once while the victim holds.
	cr = crew(3)
	victim := mk()
	ctx := ctxFor(t, 30*time.Second)
	h := r.lockVictim(ctx, victim, 100, core.WithTTL(time.Second))
	l := h.l
	for _, i := range []int{0, 2, 3} {
		srvs[i].Kill(t)
	}
	for _, i := range []int{0, 2, 3} {
		srvs[i].Restart(t)
	}
	if !r.awaitSuperseded(h) {
		t.Errorf("no other client counted a majority within %v of the restarts", supersedeBound)
	}
	if r.commit(h) {
		t.Errorf("the victim's late write was accepted")
	}
	t.Logf("victim after the majority restart: %v", l.Err())
	r.release(h)
	cr.stop()

	// Nodes 1, 2, 3 dead: two of five left.
	holder := mk()
	h = r.lockVictim(ctx, holder, 101, core.WithTTL(time.Second))
	l = h.l
	srvs[2].Kill(t)
	srvs[3].Kill(t)
	dead := []string{srvs[1].Addr(), srvs[2].Addr(), srvs[3].Addr()}
	namesDead := func(what string, err error, op string) {
		t.Helper()
		var qe *core.QuorumError
		if !errors.As(err, &qe) || qe.Op != op {
			t.Errorf("%s: got %v, want a QuorumError of %s", what, err, op)
			return
		}
		for _, a := range dead {
			if !strings.Contains(err.Error(), a) {
				t.Errorf("%s does not name dead node %s: %v", what, a, err)
			}
		}
		t.Logf("%s: %v", what, err)
	}
	select {
	case <-l.Lost():
		if !errors.Is(l.Err(), core.ErrLost) {
			t.Errorf("Err() = %v, want ErrLost", l.Err())
		}
		namesDead("holder's Err() with two nodes left", l.Err(), "extend")
	case <-time.After(lossBound):
		t.Errorf("three of five nodes dead, but the holder's Lost() did not close within %v", lossBound)
	}
	r.release(h)
	_, err := holder.TryLock(ctx, r.key)
	if errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("TryLock with two nodes left reports contention: %v", err)
	}
	namesDead("TryLock with two nodes left", err, "acquire")
	holder.Close()
	victim.Close()

	r.mustBite(t, "the majority restart did not let a second client in")
}

// Redlock over three miniredis nodes whose clocks run with real time. One
// node's clock jumps an hour ahead while the victim holds (on all three
// nodes): its lease expires there early, but the victim keeps a majority,
// nobody else gets in, and renewal heals the node. Then two nodes jump at once (Kleppmann's case): a
// second client counts a majority while the victim still holds; only the
// fence stops the victim's late write, and its renewal tells it.
func TestFaultRedlockClockJump(t *testing.T) {
	faultTest(t)
	var mrs []*miniredis.Miniredis
	for range 3 {
		mr := miniredis.RunT(t)
		t.Cleanup(mrclock.Run(mr))
		mrs = append(mrs, mr)
	}
	r := newFaultRun(t, "redlock clock jump")
	mk := func() *core.Client {
		var nodes []redis.UniversalClient
		for _, mr := range mrs {
			nodes = append(nodes, faultRedis(t, mr.Addr()))
		}
		return r.redlockClient(nodes)
	}
	// TTLs of 2 s give each node 200 ms to answer (nodeTimeout): miniredis
	// runs Lua slowly under the race detector.
	const ttl, w = 2 * time.Second, 100
	crew := func() *crew {
		var clients []*core.Client
		for range 3 {
			clients = append(clients, mk())
		}
		return r.startCrew(clients, 0, r.holdFor(0, 100*time.Millisecond), core.WithTTL(ttl))
	}
	victim := mk()
	ctx := ctxFor(t, 30*time.Second)
	// Redlock returns once a majority granted, and renewal heals a node only
	// where the key is free: with the crew contending, the victim's lease
	// may sit on a bare majority for a while, and a bare majority does not
	// survive a fault on one of its nodes. So the victim takes the key
	// while the crew rests, and the clocks jump once all nodes hold it.
	leaseKey := r.prefix + ":{" + r.key + "}"
	onAll := func(tok string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := 0
			for _, mr := range mrs {
				if v, _ := mr.Get(leaseKey); v == tok {
					n++
				}
			}
			if n == len(mrs) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the victim's lease is on %d of %d nodes after 5 s", n, len(mrs))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	cr := crew()
	time.Sleep(time.Second) // no fault yet
	cr.stop()

	// One node jumps: tolerated.
	h := r.lockVictim(ctx, victim, w, core.WithTTL(ttl))
	l := h.l
	onAll(l.Token())
	cr = crew()
	r.debugf("jump node 0")
	mrs[0].FastForward(time.Hour)
	time.Sleep(ttl * 3 / 4) // the crew tries meanwhile; a renewal comes due
	if closed(l.Lost()) {
		t.Errorf("one node's clock jump cost the victim its lease: %v", l.Err())
	}
	if r.superseded(h) {
		t.Errorf("one node's clock jump let another client in")
	}
	if !r.commit(h) {
		t.Errorf("the victim's write after one node's clock jump was rejected")
	}
	if err := r.release(h); err != nil {
		t.Errorf("victim Release after one node's clock jump: %v", err)
	}
	cr.stop()

	// Two nodes jump at once.
	h = r.lockVictim(ctx, victim, w, core.WithTTL(ttl))
	l = h.l
	onAll(l.Token())
	cr = crew()
	r.debugf("jump nodes 0, 1")
	mrs[0].FastForward(time.Hour)
	mrs[1].FastForward(time.Hour)
	if !r.awaitSuperseded(h) {
		t.Errorf("no other client counted a majority within %v of two clock jumps", supersedeBound)
	}
	if r.commit(h) {
		t.Errorf("the victim's late write was accepted")
	}
	// Its renewal finds the lease on one node: "taken over" — or, should
	// the nodes answer too slowly meanwhile, a QuorumError naming them.
	var qe *core.QuorumError
	if err := l.Err(); !strings.Contains(fmt.Sprint(err), "taken over") && !errors.As(err, &qe) {
		t.Errorf("victim's Err() does not say the lease was taken over: %v", err)
	} else {
		t.Logf("victim after two clock jumps: %v", err)
	}
	r.release(h)

	cr.stop()
	victim.Close()
	r.mustBite(t, "two clock jumps did not let a second client in")
}

// Redlock: a holder whose lease another client took over on a majority of
// nodes, and which releases before its watchdog notices, must be told — by
// Release returning ErrNotHeld (as on a single Redis), or by Do returning an
// error matching ErrLost. Three miniredis nodes, a lease with a long TTL (no
// renewal during the test), two nodes' clocks jump, a second client takes
// the key, the first releases.
func TestFaultRedlockReleaseAfterTakeover(t *testing.T) {
	faultTest(t)
	var mrs []*miniredis.Miniredis
	var nodes []redis.UniversalClient
	for range 3 {
		mr := miniredis.RunT(t)
		mrs = append(mrs, mr)
		nodes = append(nodes, faultRedis(t, mr.Addr()))
	}
	ctx := ctxFor(t, 10*time.Second)
	takeOver := func(prefix string) *core.Lock {
		t.Helper()
		// The first holder's acquisition returned at a majority; let the
		// last node's grant land too, so the jumps decide the outcome.
		deadline := time.Now().Add(5 * time.Second)
		for _, mr := range mrs {
			for !mr.Exists(prefix + ":{k}") {
				if time.Now().After(deadline) {
					t.Fatal("the first holder's lease never reached every node")
				}
				time.Sleep(time.Millisecond)
			}
		}
		for _, mr := range mrs[:2] {
			mr.FastForward(time.Minute)
		}
		b := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
		t.Cleanup(func() { b.Close() })
		l, err := b.TryLock(ctx, "k")
		if err != nil {
			t.Fatalf("second client after two clock jumps: %v", err)
		}
		return l
	}

	t.Run("Release", func(t *testing.T) {
		prefix := testPrefix()
		a := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
		defer a.Close()
		l, err := a.TryLock(ctx, "k", core.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		b := takeOver(prefix)
		defer b.Release(ctx)
		if b.Fence() <= l.Fence() {
			t.Errorf("second holder's fence %d not above %d", b.Fence(), l.Fence())
		}
		err = l.Release(ctx)
		if !errors.Is(err, core.ErrNotHeld) && !closed(l.Lost()) {
			t.Errorf("lease taken over on 2 of 3 nodes: Release returned %v and Lost() is open — the holder is never told", err)
		}
	})

	t.Run("Do", func(t *testing.T) {
		prefix := testPrefix()
		a := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
		defer a.Close()
		var b *core.Lock
		err := a.Do(ctx, "k", func(ctx context.Context) error {
			b = takeOver(prefix)
			return nil
		}, core.WithTTL(30*time.Second))
		if b != nil {
			b.Release(ctx)
		}
		if !errors.Is(err, core.ErrLost) && !errors.Is(err, core.ErrNotHeld) {
			t.Errorf("lease taken over on 2 of 3 nodes while Do's callback ran: Do returned %v, want an error matching ErrLost", err)
		}
	})
}

// Redlock: when nodes do not answer the fence write-back in time, the
// QuorumError must name them, as the acquisition's QuorumError does ("no
// answer within ..."). Nodes 0 and 1 have counters ahead, each its own, so
// no two winners agree and the fence is written back (fresh counters would
// all take the client's proposal); nodes 1 and 2 answer that write slowly.
func TestFaultRedlockSlowFenceWriteBack(t *testing.T) {
	faultTest(t)
	var mrs []*miniredis.Miniredis
	var nodes []redis.UniversalClient
	for range 3 {
		mr := miniredis.RunT(t)
		mrs = append(mrs, mr)
		nodes = append(nodes, faultRedis(t, mr.Addr()))
	}
	prefix := testPrefix()
	c := mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix)))
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	warm, err := c.TryLock(ctx, "warm-up", core.WithTTL(10*time.Second)) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx)

	mrs[0].Set(prefix+":{k}:fence", "5000000000000000")
	mrs[1].Set(prefix+":{k}:fence", "4000000000000000")
	for _, mr := range mrs[1:] {
		// The write-back script is the only one with a single key.
		mr.Server().SetPreHook(func(_ *server.Peer, cmd string, args ...string) bool {
			if (cmd == "EVALSHA" || cmd == "EVAL") && len(args) > 1 && args[1] == "1" {
				time.Sleep(400 * time.Millisecond)
			}
			return false
		})
	}
	l, err := c.TryLock(ctx, "k", core.WithTTL(time.Second))
	if err == nil {
		l.Release(ctx)
		t.Fatalf("TryLock succeeded; want a failed fence write-back")
	}
	var qe *core.QuorumError
	if !errors.As(err, &qe) || qe.Op != "fence write-back" {
		t.Fatalf("got %v, want a QuorumError of the fence write-back", err)
	}
	for _, mr := range mrs[1:] {
		if !strings.Contains(err.Error(), mr.Addr()) {
			t.Errorf("fence write-back error does not name slow node %s: %v", mr.Addr(), err)
		}
	}
}
