package core

import (
	"context"
	"sync"
	"testing"
)

// A waiter whose wait ends (ctx, Close) abandons its offer in one step
// under the notifier's lock: a hand-over that settled is the waiter's to
// take; one under way finds it gone, and its releaser gives back what it
// hands. As first built (handedAlready read the handed channel without
// the lock, and leave marked the waiter gone later), a hand-over could
// settle in between: its lock then lived, registered, until the waiter's
// leave gave it back, and a Close in that gap reported it lost to the
// Observer for an acquisition that had failed.
func TestAbandonDecidesWithSettle(t *testing.T) {
	n := newNotifier(nil, 0)
	offering := func() *waiter {
		return &waiter{handed: make(chan handOutcome, 1), offer: &handOffer{ctx: context.Background()}}
	}
	handed := &Lock{}

	// Under way: gone, and the releaser's settle says so.
	w := offering()
	w.reserved = true
	if _, took := n.abandon(w); took {
		t.Fatal("took an outcome from a hand-over still under way")
	}
	if n.present(w) {
		t.Fatal("a waiter that abandoned during a hand-over still counts as present")
	}
	if n.settle(w, handOutcome{h: handed}) {
		t.Fatal("settle handed a lock to a waiter that abandoned: nobody takes it, nobody gives it back")
	}

	// Settled: the waiter takes it.
	w = offering()
	w.reserved = true
	if !n.settle(w, handOutcome{h: handed}) {
		t.Fatal("settle found a waiting waiter gone")
	}
	if o, took := n.abandon(w); !took || o.h != handed {
		t.Fatalf("abandon after settle: took %v, lock %p, want the handed %p", took, o.h, handed)
	}

	// Neither: nothing, and the offer is withdrawn.
	w = offering()
	if _, took := n.abandon(w); took || w.offer != nil {
		t.Fatalf("abandon without a hand-over: took %v, offer %v", took, w.offer)
	}

	// Racing: every handed lock is taken by the waiter or refused to the
	// releaser, exactly one of the two.
	for range 2000 {
		w := offering()
		w.reserved = true
		var settled, took bool
		var wg sync.WaitGroup
		wg.Go(func() { settled = n.settle(w, handOutcome{h: handed}) })
		wg.Go(func() { _, took = n.abandon(w) })
		wg.Wait()
		if settled != took {
			t.Fatalf("settle reported %v, the waiter took %v: the lock is %s", settled, took, map[bool]string{true: "nobody's", false: "both's"}[settled])
		}
	}
}
