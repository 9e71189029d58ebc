package core_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
)

// Tests from the review of 2026-11-28 (second round) of b5390a3 and
// b543c63; each failed before the commit that followed it.

// Redlock's fence write-back (fence_max.lua) SET the counter with PX of
// the fixed retention (5 min), overwriting the TTL+1min retentionFor gave
// it: a lease of 10 min outlived its counter by ~5 min when no renewal
// kept it (WithAutoRenew(false)).
func TestReviewRevFenceWriteBackShortensCounter(t *testing.T) {
	rdbs, direct, pxs := redlockNodes(t, 3, true)
	opt := core.WithKeyPrefix("rvfm")
	c := mustNew(core.NewRedlock(rdbs, opt))
	defer c.Close()
	bg := context.Background()
	names := core.StorageNames("rvfm", "k")
	// Node 0's counter far above the proposal: the nodes disagree, the
	// client writes the highest fence back to the others.
	high := time.Now().Add(time.Hour).UnixMicro()
	if err := direct[0].Set(bg, names[1], fmt.Sprint(high), 20*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if w, err := c.TryLock(bg, "warm"); err != nil {
		t.Fatal(err)
	} else if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	// Node 2 answers last (within the node timeout): the winners are 0, 1.
	undo := pxs[2].Delay(faultnet.Up, 100*time.Millisecond, 0)
	defer undo()
	l, err := c.TryLock(bg, "k", core.WithTTL(10*time.Minute), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	time.Sleep(300 * time.Millisecond) // node 2's late grant and write-back land
	for i := 1; i < 3; i++ {
		lp := direct[i].PTTL(bg, names[0]).Val()
		cp := direct[i].PTTL(bg, names[1]).Val()
		t.Logf("node %d: lease pttl %v, counter pttl %v", i, lp, cp)
		if cp < lp {
			t.Errorf("node %d: the fence counter (pttl %v) expires before the lease (pttl %v)", i, cp, lp)
		}
	}
}

// A caller under its own token that waits for replicas claims the grant a
// release handed it ("<token>|"): the scripts reported a claim as a
// re-entry (code 2), so when too few replicas acknowledged it the claim
// was not given back, and the key stayed taken for the caller's whole TTL
// by a lease nobody held (the grant alone lapses after the claim window).
// A claim is an acquisition now (code 1): given back, fenced.
func TestReviewRevAckedFailedClaimBlocksKey(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			rdb := redistest.StartServer(t).Client(t)
			prefix := fmt.Sprintf("rvac%v", fair)
			bg := context.Background()
			names := core.StorageNames(prefix, "k")
			acked := redisClients(t, rdb, prefix, 1, core.WithReplicaAck(1, 50*time.Millisecond))[0]
			rival := redisClients(t, rdb, prefix, 1)[0]
			// A grant to token job-c, as a release leaves it (claim window).
			if err := rdb.Set(bg, names[0], "job-c|", 3*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			opts := []core.LockOption{core.WithToken("job-c"), core.WithTTL(time.Minute)}
			if fair {
				opts = append(opts, core.WithFair())
			}
			_, err := acked.TryLock(bg, "k", opts...)
			if !errors.Is(err, core.ErrReplicaAck) {
				t.Fatalf("the claim without a replica: %v, want ErrReplicaAck", err)
			}
			if p := rdb.PTTL(bg, names[0]).Val(); p > 5*time.Second {
				v := rdb.Get(bg, names[0]).Val()
				t.Errorf("the failed claim left lease %q for %v, nobody holding it", v, p)
			}
			if l, err := rival.TryLock(bg, "k"); err == nil {
				l.Release(bg)
			} else {
				t.Logf("rival: %v", err)
			}
		})
	}
}

// The same through a real hand-over: a fair waiter under a caller's token
// whose Client waits for replicas is granted the key by the holder's
// Release, claims it, gets too few acknowledgements and returns an error;
// the key must not stay taken for its TTL by nobody.
func TestReviewRevAckedFairWaiterClaimBlocksKey(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	bg := context.Background()
	names := core.StorageNames("rvaw", "k")
	cs := redisClients(t, rdb, "rvaw", 2)
	holder, rival := cs[0], cs[1]
	acked := redisClients(t, rdb, "rvaw", 1, core.WithReplicaAck(1, 50*time.Millisecond))[0]
	l, err := holder.TryLock(bg, "k", core.WithFair(), core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		w, err := acked.Lock(ctx, "k", core.WithFair(), core.WithToken("job-w"), core.WithTTL(time.Minute))
		if err == nil {
			w.Release(bg)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	err = <-done
	t.Logf("waiter: %v; lease %q pttl %v", err, rdb.Get(bg, names[0]).Val(), rdb.PTTL(bg, names[0]).Val())
	if !errors.Is(err, core.ErrReplicaAck) {
		t.Skipf("waiter: %v, want ErrReplicaAck", err)
	}
	if p := rdb.PTTL(bg, names[0]).Val(); p > 5*time.Second {
		t.Errorf("the failed claim left lease %q for %v, nobody holding it", rdb.Get(bg, names[0]).Val(), p)
	}
	if r, err := rival.TryLock(bg, "k"); err == nil {
		r.Release(bg)
	} else {
		t.Errorf("rival: %v", err)
	}
}

// A fair waiter of token job-t (process B, waiting for replicas) is
// granted the key; its twin A (another process, same token) claims the
// grant first and holds it. B's claim is then a re-entry of A's lease;
// too few replicas acknowledge it, B's Lock fails, and its clean-up
// (leaveQueue) released by token, unfenced: A's lease was deleted and A
// never told. A waiter under a caller's token now only leaves the queue
// (queueLeaver).
func TestReviewRevWaiterCleanupDeletesTwinClaim(t *testing.T) {
	srv := redistest.StartServer(t)
	px := faultnet.Start(t, srv.Addr())
	rdb := srv.Client(t)
	slow := redis.NewClient(&redis.Options{Addr: px.Addr()})
	t.Cleanup(func() { slow.Close() }) // after the Clients' Close (cleanups run last first)
	bg := context.Background()
	cs := redisClients(t, rdb, "rvwt", 3)
	holder, a, rival := cs[0], cs[1], cs[2]
	b := redisClients(t, slow, "rvwt", 1, core.WithReplicaAck(1, 50*time.Millisecond))[0]
	for _, c := range []*core.Client{holder, a, b, rival} {
		if w, err := c.TryLock(bg, "warm"); err == nil {
			w.Release(bg)
		}
	}
	tok := core.WithToken("job-t")
	h, err := holder.TryLock(bg, "k", core.WithFair(), core.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		w, err := b.Lock(ctx, "k", core.WithFair(), tok, core.WithTTL(time.Minute))
		if err == nil {
			w.Release(bg)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // B queues
	undo := px.Delay(faultnet.Up, 300*time.Millisecond, 0)
	defer undo()
	if err := h.Release(bg); err != nil {
		t.Fatal(err)
	}
	var al *core.Lock
	for deadline := time.Now().Add(250 * time.Millisecond); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if al, err = a.TryLock(bg, "k", core.WithFair(), tok, core.WithTTL(30*time.Second)); err == nil {
			break
		}
	}
	if al == nil {
		t.Skipf("A did not claim the grant first: %v", err)
	}
	defer al.Release(bg)
	err = <-done
	t.Logf("B: %v", err)
	keptOrTold(t, rival, "k", al)
}
