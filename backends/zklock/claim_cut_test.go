package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/faultnet"
)

// A waiter under a caller's token (WithToken) that queued (it starved:
// the default mode queues after 50 ms) is woken by the holder's release
// and attempts: the key is free, so zklock creates its node (the lowest:
// the lease) and reads it back in claim. The wait ends (ctx) between the
// two: the attempt fails, Lock returns ErrNotAcquired, and core's
// leaveQueue, under a caller's token on a backend of New, releases
// nothing. The node has no session entry (claim never recorded it), so
// the reaper never deletes it: the key stays held by nobody for as long
// as the session lives.
// A TryLock under a caller's token (WithToken) on a free key creates its
// node, the lowest, and so the lease, then claims it. When the call ends
// during the claim (its ctx, or a read that failed), the node was
// recorded nowhere: core takes back a failed attempt's lease only under a
// token of its own, and the reaper did not know it, so the key stayed
// held by nobody until the session ended (review 11). The node now goes
// to the reaper.
func TestGivenTokenClaimCutShortLeavesNoLease(t *testing.T) {
	s := server(t)
	watch := connect(t, s.addr, sessionTimeout)
	h, c := newClient(t), newClient(t)
	const lag = 50 * time.Millisecond
	px := faultnet.Start(t, s.addr)
	px.Delay(faultnet.Down, lag, 0) // every answer to W comes lag late
	wconn := connect(t, px.Addr(), sessionTimeout)
	w, err := zklock.New(wconn, zklock.WithSessionTimeout(sessionTimeout), zklock.WithRoot(testRoot))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cut := 0
	for try := 0; try < 30; try++ {
		key := fmt.Sprintf("cut-claim-%d", try)
		tok := fmt.Sprintf("given-%d", try)
		ctx := ctxT(t)
		hl, err := h.TryLock(ctx, key) // makes the key's node, to watch
		if err != nil {
			t.Fatal(err)
		}
		lock := ""
		roots, _, err := watch.Children(testRoot)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range roots {
			if strings.Contains(r, "{"+key+"}") {
				lock = testRoot + "/" + r
			}
		}
		mustRelease(t, hl)
		wctx, cancel := context.WithCancelCause(ctx)
		stop := make(chan struct{})
		go func() { // ends W's call about when its claim reads the node
			for {
				kids, _, ev, err := watch.ChildrenW(lock)
				if err != nil {
					return
				}
				for _, k := range kids {
					if strings.HasPrefix(k, tok+"-") {
						time.Sleep(lag*3/2 + time.Duration(try%6)*lag/5)
						cancel(errors.New("the call ends"))
						return
					}
				}
				select {
				case <-ev:
				case <-stop:
					return
				}
			}
		}()
		l, err := w.TryLock(wctx, key, core.WithToken(tok), core.WithTTL(2*time.Second))
		close(stop)
		cancel(nil)
		if err == nil {
			mustRelease(t, l)
			continue
		}
		cut++
		// The lease, had it been made, lasts 2 s; the reaper runs well
		// within that once it knows the node.
		deadline := time.Now().Add(4 * time.Second)
		for {
			cl, err := c.TryLock(ctx, key)
			if err == nil {
				mustRelease(t, cl)
				break
			}
			if time.Now().After(deadline) {
				kids, _, _ := watch.Children(lock)
				t.Fatalf("try %d (W: %v): 4 s after W's TryLock failed, its token's node %v still holds the key, recorded nowhere (C: %v)", try, err, kids, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if cut == 0 {
		t.Fatal("no try cut W's call short: the test tested nothing (the proxy's lag or the watch's timing no longer lands in the call)")
	}
	t.Logf("%d of 30 tries cut W's call short", cut)
}
