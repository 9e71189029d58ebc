package core

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A caller that gives up in line just as it is let in passes its turn
// on, and the lease handed with it: whatever the interleaving, the callers
// behind it still get in one at a time, the first of them gets the lease,
// and the turnstile is gone once the last one leaves.
func TestTurnstileGiveUpRacesLetIn(t *testing.T) {
	var ts turnstiles
	done := make(chan struct{})
	for range 500 {
		first, err := ts.enter(context.Background(), done, "k")
		if err != nil || first.queued {
			t.Fatalf("first caller: %v, queued %v", err, first != nil && first.queued)
		}
		ctx, cancel := context.WithCancel(context.Background())
		quitter := make(chan error, 1)
		go func() {
			p, err := ts.enter(ctx, done, "k")
			if p != nil { // in before its context ended: as if it gave up then
				p.leave(p.held)
			}
			quitter <- err
		}()
		var inside sync.Mutex // held by the caller inside
		var handed sync.Map   // the callers that got the lease
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := ts.enter(context.Background(), done, "k")
				if err != nil {
					t.Error(err)
					return
				}
				if !inside.TryLock() {
					t.Error("two callers inside at once")
				}
				if p.held != nil {
					handed.Store(p, true)
				}
				time.Sleep(10 * time.Microsecond)
				inside.Unlock()
				p.leave(nil)
			}()
		}
		// Two of the three in line (the quitter counts), so at least one of
		// the two callers is: a leave with nobody in line drops the lease,
		// by design. The race under test is the quitter's give-up against
		// being let in.
		for queued := 0; queued < 2; time.Sleep(10 * time.Microsecond) {
			ts.mu.Lock()
			queued = len(ts.keys["k"].queue)
			ts.mu.Unlock()
		}
		go cancel()
		first.leave(&lease{key: "k"})
		wg.Wait()
		<-quitter
		got := 0
		handed.Range(func(any, any) bool { got++; return true })
		if got != 1 {
			t.Fatalf("%d callers got the lease the first left with, want 1", got)
		}
		ts.mu.Lock()
		n := len(ts.keys)
		ts.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d turnstiles left after every caller left", n)
		}
	}
}

// The lease a caller leaves with reaches the next caller let in, even
// through one that gave up in line; nobody else sees it.
func TestTurnstileHandsOnTheHeldLease(t *testing.T) {
	var ts turnstiles
	done := make(chan struct{})
	first, _ := ts.enter(context.Background(), done, "k")
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := ts.enter(ctx, done, "k")
		gaveUp <- err
	}()
	time.Sleep(10 * time.Millisecond)
	next := make(chan *pass, 1)
	go func() {
		p, _ := ts.enter(context.Background(), done, "k")
		next <- p
	}()
	time.Sleep(10 * time.Millisecond)
	l := &lease{key: "k"}
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a caller whose context ended got in")
	}
	first.leave(l)
	p := <-next
	if p.held != l {
		t.Fatalf("the next caller got held %p, want the lease left with (%p)", p.held, l)
	}
	p.leave(nil)
	third, _ := ts.enter(context.Background(), done, "k")
	if third.held != nil || third.queued {
		t.Fatalf("a caller into an empty turnstile got held %p, queued %v", third.held, third.queued)
	}
	third.leave(nil)
}
