package core

import (
	"context"
	"testing"
	"time"
)

// nopSub is a subscriber whose subscriptions are confirmed at once.
type nopSub struct{ n *notifier }

func (s nopSub) subscribe(_ context.Context, channel string) error {
	s.n.confirm(channel)
	return nil
}
func (nopSub) unsubscribe(...string) {}

// A grant on the Client's grant channel that comes before its waiter has
// joined the notifier (the waiter's first attempt queued it, and the key
// was released before it joined) is kept and handed to the waiter when it
// joins; one for nobody is dropped after the claim window; other waiters
// of the key are not woken by it.
func TestEarlyGrantKept(t *testing.T) {
	n := newNotifier(nil, 0)
	n.sub = nopSub{n}
	ch := n.grantChannel("p")
	ctx := context.Background()

	other := n.join(ctx, "p:{k}", "other")
	n.deliver(ch, "g:tok|p:{k}")
	select {
	case <-other.wake:
		t.Fatal("a grant to another token woke this waiter")
	default:
	}
	w := n.join(ctx, "p:{k}", "tok")
	select {
	case <-w.wake:
	default:
		t.Fatal("the grant that came before the waiter joined was lost")
	}
	n.leave(w, true)

	n.deliver(ch, "g:gone|p:{k}")
	n.sweep(time.Now().Add(fairClaim))
	late := n.join(ctx, "p:{k}", "gone")
	select {
	case <-late.wake:
		t.Fatal("a grant older than the claim window was handed over")
	default:
	}
	if len(n.early) != 0 {
		t.Fatalf("kept grants: %v", n.early)
	}
	n.leave(late, false)
	n.leave(other, false)
}
