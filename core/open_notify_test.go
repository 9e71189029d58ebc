package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// notifyBackend is mapBackend with release notifications whose first
// Subscribe fails (the store's listener was not up yet) but, like
// sqllock's, keeps the subscription: deliveries flow once it is up.
type notifyBackend struct {
	*mapBackend
	mu     sync.Mutex
	subs   map[string]func(string)
	failed bool
}

func (n *notifyBackend) Capabilities() core.Capability { return core.CapNotify }

func (n *notifyBackend) Subscribe(_ context.Context, key string, deliver func(string)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subs[key] = deliver
	if !n.failed {
		n.failed = true
		return errors.New("listener not up yet")
	}
	return nil
}

func (n *notifyBackend) Unsubscribe(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.subs, key)
}

func (n *notifyBackend) Release(ctx context.Context, key, token string) (bool, error) {
	ok, err := n.mapBackend.Release(ctx, key, token)
	if ok {
		n.mu.Lock()
		deliver := n.subs[key]
		n.mu.Unlock()
		if deliver != nil {
			deliver("")
		}
	}
	return ok, err
}

// After one failed Subscribe, waiters of the key still get it promptly
// after a release: they do not each wait for a confirmation that never
// comes.
func TestNewSubscribeFailedOnce(t *testing.T) {
	c, err := core.New(&notifyBackend{mapBackend: newMapBackend(), subs: map[string]func(string){}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	held, err := c.TryLock(ctx, "k", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The first waiter's subscription fails; it gives up.
	if _, err := c.Lock(ctx, "k", core.WithWaitTimeout(20*time.Millisecond)); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		type result struct {
			l  *core.Lock
			at time.Time
		}
		got := make(chan result, 1)
		go func() {
			l, err := c.Lock(ctx, "k", core.WithTTL(time.Minute), core.WithWaitTimeout(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- result{l, time.Now()}
		}()
		time.Sleep(20 * time.Millisecond)
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.l == nil {
			t.FailNow()
		}
		at := r.at
		held = r.l
		if d := at.Sub(released); d > 200*time.Millisecond {
			t.Fatalf("round %d: the waiter got the key %v after the release", round, d)
		}
	}
}
