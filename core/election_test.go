package core_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// TestCampaignOneLeader: campaigners on separate Clients lead one at a
// time, each in turn, with rising fences; the leader's announcement is
// its metadata.
func TestCampaignOneLeader(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		const campaigners, terms = 4, 3
		var leaders, most atomic.Int64
		var mu sync.Mutex
		var lastFence int64
		var wg sync.WaitGroup
		for i := range campaigners {
			c := newClient()
			defer c.Close()
			wg.Go(func() {
				for range terms {
					ctx := ctxFor(t, 20*time.Second)
					lead, err := c.Campaign(ctx, "election", "node-"+string(rune('a'+i)), core.WithTTL(5*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					n := leaders.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					info, err := c.Inspect(ctx, "election")
					if err != nil || info.Token != lead.Token() || info.Metadata != "node-"+string(rune('a'+i)) {
						t.Errorf("Inspect during the term: %+v, %v", info, err)
					}
					mu.Lock()
					if lead.Fence() <= lastFence {
						t.Errorf("term fence %d after %d", lead.Fence(), lastFence)
					}
					lastFence = lead.Fence()
					mu.Unlock()
					time.Sleep(3 * time.Millisecond)
					leaders.Add(-1)
					if err := lead.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if m := most.Load(); m != 1 {
			t.Errorf("%d leaders at once", m)
		}
	})
}

// TestObserve: an observer on another Client sees the state at once, then
// every leader of a sequence of terms and the gaps between them, and a
// crashed leader's lease running out.
func TestObserve(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		watcher, cand := newClient(), newClient()
		defer watcher.Close()
		defer cand.Close()
		ctx, cancel := context.WithCancel(ctxFor(t, 30*time.Second))
		defer cancel()
		infos := watcher.Observe(ctx, "leader")
		next := func(what string) core.Info {
			t.Helper()
			select {
			case info := <-infos:
				return info
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: nothing observed", what)
				return core.Info{}
			}
		}
		if info := next("the start"); info.Held {
			t.Fatalf("a leader before any campaign: %+v", info)
		}
		for i := range 3 {
			lead, err := cand.Campaign(ctx, "leader", "10.0.0."+string(rune('1'+i)))
			if err != nil {
				t.Fatal(err)
			}
			if info := next("a new leader"); !info.Held || info.Token != lead.Token() || info.Metadata != "10.0.0."+string(rune('1'+i)) {
				t.Fatalf("term %d: observed %+v, want leader %s", i, info, lead.Token())
			}
			time.Sleep(20 * time.Millisecond)
			lead.Release(ctx)
			if info := next("a resignation"); info.Held {
				t.Fatalf("term %d: observed %+v after the release, want no leader", i, info)
			}
		}
		// A leader that stops renewing (a crash) leaves with its lease.
		crashed, err := cand.Campaign(ctx, "leader", "doomed", core.WithTTL(300*time.Millisecond), core.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		if info := next("the last leader"); info.Token != crashed.Token() {
			t.Fatalf("observed %+v, want the last leader", info)
		}
		if info := next("the expiry"); info.Held {
			t.Fatalf("observed %+v after the lease expired, want no leader", info)
		}
		cancel()
		for range infos { // closed when ctx ends
		}
	})
}

// TestObserverTakesNoWakeUp: an observer on the Client of a waiter never
// takes the release's wake-up from it — the waiter gets the key within a
// bound shorter than any fallback poll.
func TestObserverTakesNoWakeUp(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		c, holder := newClient(), newClient()
		defer c.Close()
		defer holder.Close()
		ctx, cancel := context.WithCancel(ctxFor(t, 20*time.Second))
		defer cancel()
		infos := c.Observe(ctx, "busy")
		<-infos
		go func() {
			for range infos {
			}
		}()
		for i := range 3 {
			h, err := holder.Lock(ctx, "busy")
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(30 * time.Millisecond)
				h.Release(ctx)
			}()
			l, err := c.Lock(ctx, "busy", core.WithWaitTimeout(3*time.Second))
			if err != nil {
				t.Fatalf("round %d: the waiter was not woken: %v", i, err)
			}
			l.Release(ctx)
		}
	})
}

// TestCampaignCleanup covers the cleanup bugs of etcd's election (etcd
// #21128: a campaign that fails leaves its key; #22123: a resignation whose
// request failed is forgotten) and stale deletes (tikv/pd #10635): a
// campaign that gives up leaves nothing behind, a resignation on an
// already cancelled context still ends the term, and a deposed leader's
// late resignation never removes its successor.
func TestCampaignCleanup(t *testing.T) {
	semBackends(t, func(t *testing.T, newClient func() *core.Client, _ redis.UniversalClient) {
		a, b := newClient(), newClient()
		defer a.Close()
		defer b.Close()
		ctx := ctxFor(t, 20*time.Second)
		lead, err := a.Campaign(ctx, "seat", "a")
		if err != nil {
			t.Fatal(err)
		}
		// b campaigns past the starvation threshold (so it queues), then
		// gives up: nothing of it stays.
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := b.Campaign(cctx, "seat", "b"); err == nil {
			t.Fatal("b led while a did")
		}
		cancel()
		info, err := a.Inspect(ctx, "seat")
		if err != nil || info.Token != lead.Token() || info.Waiters != 0 {
			t.Fatalf("after b gave up: %+v, %v (want a leading, nobody queued)", info, err)
		}
		// a resigns on a context already cancelled: the term ends anyway.
		dead, stop := context.WithCancel(ctx)
		stop()
		if err := lead.Release(dead); err != nil {
			t.Fatalf("Release on a cancelled context: %v", err)
		}
		if info, _ := a.Inspect(ctx, "seat"); info.Held {
			t.Fatalf("still led after the resignation: %+v", info)
		}
		// b leads; a's late second resignation does not touch b's term.
		blead, err := b.Campaign(ctx, "seat", "b", core.WithWaitTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_ = lead.Release(ctx)
		if info, _ := b.Inspect(ctx, "seat"); info.Token != blead.Token() {
			t.Fatalf("b's term disturbed: %+v", info)
		}
		blead.Release(ctx)
	})
}
