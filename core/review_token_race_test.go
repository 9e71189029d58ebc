package core_test

// Regression tests from the adversarial review of the watchdog's typed
// heap, the waiter mark and tooLate (third round). Each failed before its
// fix.

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A WithToken re-entry racing the release of a twin of the same token in
// the same Client: the re-entry runs on Redis before the release deletes
// the lease, but registers after the release listed the twins it tells.
// Nobody told the re-entered handle, which believed in a lease that was
// gone while a rival took the key. Either the re-entry's answer comes
// after the release ended ("answer late"), or the release reaches Redis
// after the re-entry registered ("release late"). Either way the re-entry
// must make no lock, or its handle must be told before a rival can take
// the key. (The re-entry takes a new fence, and a release names the fence
// it ends: one that reaches Redis after the re-entry leaves the lease be,
// and reports ErrNotHeld.)
func TestReviewReentryRacingTwinRelease(t *testing.T) {
	for _, tc := range []struct {
		name         string
		releaseFirst bool // the release starts first, and its command is held
	}{{"answer late", false}, {"release late", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, prefix := sharedRedis(t)
			kf := newKeyFault(t, rdb)
			c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
			defer c.Close()
			rival := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
			defer rival.Close()
			ctx := ctxFor(t, 20*time.Second)
			a, err := c.TryLock(ctx, "k", core.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			reenter := func() (*core.Lock, error) {
				return c.TryLock(ctx, "k", core.WithToken(a.Token()), core.WithTTL(10*time.Second))
			}
			var b *core.Lock
			if tc.releaseFirst {
				// The release's command waits 300 ms before it is sent.
				held := kf.add(&faultRule{key: prefix + ":{k}", delay: 300 * time.Millisecond, onWire: true, times: 1})
				released := make(chan error, 1)
				go func() { released <- a.Release(ctx) }()
				waitHit(t, held, 5*time.Second)
				b, err = reenter()
				if rerr := <-released; rerr != nil && !errors.Is(rerr, core.ErrNotHeld) {
					t.Fatalf("release: %v", rerr)
				}
				if err != nil {
					t.Logf("re-entry: %v", err)
					return // no lock: nothing to believe
				}
			} else {
				// The re-entry's answer is held back 300 ms (it has run).
				late := kf.add(&faultRule{key: prefix + ":{k}", late: true, delay: 300 * time.Millisecond, times: 1})
				got := make(chan error, 1)
				go func() {
					var err error
					b, err = reenter()
					got <- err
				}()
				waitHit(t, late, 5*time.Second)
				time.Sleep(20 * time.Millisecond) // the re-entry reached Redis
				if err := a.Release(ctx); err != nil && !errors.Is(err, core.ErrNotHeld) {
					t.Fatalf("release: %v", err)
				}
				if err := <-got; err != nil {
					t.Logf("re-entry: %v", err)
					return // no lock: nothing to believe
				}
			}
			defer b.Release(ctx)
			other, err := rival.TryLock(ctx, "k", core.WithTTL(10*time.Second))
			if errors.Is(err, core.ErrNotAcquired) {
				return // the re-entered lease is in place
			}
			if err != nil {
				t.Fatalf("rival: %v", err)
			}
			defer other.Release(ctx)
			select {
			case <-b.Lost():
			default:
				t.Errorf("rival holds the key (fence %d) while the re-entered handle (fence %d) was never told: b.Err()=%v",
					other.Fence(), b.Fence(), b.Err())
			}
		})
	}
}

// A Lock with WithToken that gives up after the key was granted to it
// leaves the queue by releasing its token, to pass the grant on. If a
// TryLock of the same token in the same Client re-entered the grant
// meanwhile, that release deleted the re-entered lease, and nobody told
// its handle.
func TestReviewTokenWaiterGivingUpDeletesTwin(t *testing.T) {
	rdb, prefix := sharedRedis(t)
	kf := newKeyFault(t, rdb)
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	defer c.Close()
	other, _ := sharedRedis(t)
	rival := mustNew(core.NewRedis(other, core.WithKeyPrefix(prefix)))
	defer rival.Close()
	ctx := ctxFor(t, 20*time.Second)
	x, err := rival.TryLock(ctx, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tok := "shared-token-1"
	waited := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "k", core.WithToken(tok), core.WithWaitTimeout(800*time.Millisecond))
		if err == nil {
			l.Release(ctx)
		}
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond) // it queues (after 50 ms)
	// Its claim of the grant is held back until its wait ends.
	claim := kf.add(&faultRule{key: prefix + ":{k}", delay: 5 * time.Second, times: 1})
	if err := x.Release(ctx); err != nil { // grants the key to the waiter
		t.Fatal(err)
	}
	waitHit(t, claim, 5*time.Second)
	b, err := c.TryLock(ctx, "k", core.WithToken(tok), core.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("re-entry of the grant: %v", err)
	}
	defer b.Release(ctx)
	if err := <-waited; err == nil {
		t.Fatal("the waiter got the key: the test proves nothing")
	} else {
		t.Logf("waiter: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // its leaving is on its way
	r, err := rival.TryLock(ctx, "k", core.WithTTL(10*time.Second))
	if err != nil {
		t.Logf("rival: %v: the re-entered lease stands", err)
		return
	}
	defer r.Release(ctx)
	select {
	case <-b.Lost():
	default:
		t.Errorf("rival holds the key (fence %d) while the re-entered handle (fence %d) was never told", r.Fence(), b.Fence())
	}
}
