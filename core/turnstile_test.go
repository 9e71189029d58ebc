package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// miniNodes starts three miniredis nodes for Redlock.
func miniNodes(t *testing.T) []redis.UniversalClient {
	t.Helper()
	var nodes []redis.UniversalClient
	for range 3 {
		_, rdb := startMiniredis(t)
		nodes = append(nodes, rdb)
	}
	return nodes
}

// miniRedlock is a Redlock Client over three miniredis nodes, warmed up.
func miniRedlock(t *testing.T) *core.Client {
	t.Helper()
	c := mustNew(core.NewRedlock(miniNodes(t)))
	t.Cleanup(func() { c.Close() })
	warmUp(t, c)
	return c
}

// On Redlock, a Client's callers of one key take it in arrival order, and
// a holder that releases and asks again at once queues behind the callers
// already waiting instead of taking the key back before them (two callers
// of one Client asking the nodes at once split their votes).
func TestRedlockCallersOfOneClientInArrivalOrder(t *testing.T) {
	c := miniRedlock(t)
	ctx := ctxFor(t, 30*time.Second)
	first, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	take := func(id int) error {
		l, err := c.Lock(ctx, "k")
		if err != nil {
			return fmt.Errorf("caller %d: %w", id, err)
		}
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		return l.Release(ctx)
	}
	errs := make(chan error, 4)
	for id := 1; id <= 3; id++ {
		go func() { errs <- take(id) }()
		time.Sleep(50 * time.Millisecond) // in line before the next
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { errs <- take(0) }() // the holder asks again at once
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{1, 2, 3, 0}; !slices.Equal(order, want) {
		t.Fatalf("took the key in the order %v, want %v", order, want)
	}
}

// A caller that gives up while in line leaves it; the next one still gets
// the key, and a caller with a retry budget does not wait in line (the
// budget bounds its wait).
func TestRedlockCallerInLineGivesUp(t *testing.T) {
	c := miniRedlock(t)
	ctx := ctxFor(t, 30*time.Second)
	first, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *core.Lock, 2)
	errs := make(chan error, 2)
	lock := func() {
		l, err := c.Lock(ctx, "k")
		if err != nil {
			errs <- err
			return
		}
		got <- l
	}
	go lock() // tries, then waits for the release
	time.Sleep(50 * time.Millisecond)

	start := time.Now()
	_, err = c.Lock(ctx, "k", core.WithWaitTimeout(200*time.Millisecond)) // in line
	if !errors.Is(err, core.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller in line that timed out: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("its wait timeout of 200ms ended it after %v", d)
	}
	start = time.Now()
	_, err = c.Lock(ctx, "k", core.WithRetryBudget(0))
	if !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("a caller with a retry budget of 0: %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a caller with a retry budget of 0 waited %v", d)
	}

	go lock() // in line behind the first
	time.Sleep(50 * time.Millisecond)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case l := <-got:
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case err := <-errs:
			t.Fatal(err)
		}
	}
}

// A caller let in while another caller of its Client holds the key waits
// for that lease to end — here by expiring, which no notification tells —
// and takes the key then, not a fallback's seconds later.
func TestRedlockCallerAfterSiblingLeaseExpires(t *testing.T) {
	nodes := miniNodes(t)
	c := mustNew(core.NewRedlock(nodes))
	t.Cleanup(func() { c.Close() })
	other := mustNew(core.NewRedlock(nodes)) // another process
	t.Cleanup(func() { other.Close() })
	warmUp(t, c)
	ctx := ctxFor(t, 30*time.Second)
	x, err := other.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan *core.Lock, 1)
	go func() { // in line first: it waits for the other process's release
		l, err := c.Lock(ctx, "k", core.WithTTL(500*time.Millisecond), core.WithAutoRenew(false))
		if err != nil {
			t.Error(err)
			close(first)
			return
		}
		first <- l
	}()
	time.Sleep(50 * time.Millisecond)
	second := make(chan error, 1)
	go func() { // let in once the first has the key: it waits for its lease
		l, err := c.Lock(ctx, "k")
		if err == nil {
			err = l.Release(ctx)
		}
		second <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-first
	if l == nil {
		t.FailNow()
	}
	<-l.Lost() // expired, never released
	lost := time.Now()
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("the first caller's lease expired %v ago and the caller after it still waits", time.Since(lost))
	}
}

// Close ends the wait of a caller in line with ErrClosed.
func TestRedlockCallerInLineClose(t *testing.T) {
	c := miniRedlock(t)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := c.TryLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Lock(ctx, "k")
			errs <- err
		}()
		time.Sleep(50 * time.Millisecond)
	}
	c.Close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, core.ErrClosed) {
				t.Fatalf("a waiter after Close: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter still waits 5s after Close")
		}
	}
}
