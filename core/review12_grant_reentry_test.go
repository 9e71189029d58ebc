package core_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// In memory, a non-fair acquisition under token T of a key granted to T
// ("T|", not claimed yet) claimed the grant but left its value "T|"
// (acquire.lua makes it the caller's value). A fair waiter under T that
// then gave up left the queue with memoryBackend.leave (103d316), which
// took "T|" for a grant not claimed and passed it on: another token took
// the key while the TryLock's holder was not told (review 12: 50 of 50
// trials). Any claim now gives the lease the caller's value.
func TestReview12LeavePassesOnReenteredGrant(t *testing.T) {
	review12Run(t, func() (*core.Client, error) { return core.NewMemory() })
}

// The waiter of the default mode that starved and queued does the same.
func TestReview12LeavePassesOnReenteredGrantStarving(t *testing.T) {
	review12Fair = false
	defer func() { review12Fair = true }()
	review12Run(t, func() (*core.Client, error) { return core.NewMemory() })
}

var review12Fair = true

// The same on Redis, where it held already (acquire.lua gives a claimed
// grant the caller's value).
func TestReview12LeavePassesOnReenteredGrantRedis(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	review12Run(t, func() (*core.Client, error) { return core.NewRedis(rdb, core.WithKeyPrefix(prefix)) })
}

func review12Run(t *testing.T, newClient func() (*core.Client, error)) {
	ctx := context.Background()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	hit, gaveUp, tryErr, claimed := 0, 0, 0, 0
	for trial := 0; trial < review12Trials; trial++ {
		c, err := newClient()
		if err != nil {
			t.Fatal(err)
		}
		x, err := c.TryLock(ctx, "k", core.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ctx1, cancel1 := context.WithCancel(ctx)
		done := make(chan *core.Lock, 1)
		go func() {
			opts := []core.LockOption{core.WithToken("job-t"), core.WithTTL(time.Minute)}
			if review12Fair {
				opts = append(opts, core.WithFair())
			}
			l, _ := c.Lock(ctx1, "k", opts...)
			done <- l
		}()
		for {
			info, _ := c.Inspect(ctx, "k")
			if info.Waiters == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond) // the waiter sleeps in its select
		// One P: the waiter, woken, runs once this goroutine blocks.
		cancel1()
		x.Release(ctx) // grants "job-t|" and wakes the waiter
		h, err := c.TryLock(ctx, "k", core.WithToken("job-t"), core.WithTTL(time.Minute))
		w := <-done
		if err != nil {
			tryErr++
			if tryErr == 1 {
				t.Logf("TryLock: %v", err)
			}
			c.Close()
			continue
		}
		if w != nil {
			claimed++ // the waiter claimed: both hold, fine
			c.Close()
			continue
		}
		gaveUp++
		o, err := c.TryLock(ctx, "k", core.WithTTL(time.Minute))
		if err == nil && h.Err() == nil {
			info, _ := c.Inspect(ctx, "k")
			if hit == 0 {
				t.Errorf("trial %d: holder under job-t (Err nil, fence %d) while another token took the key (fence %d, Inspect token %q)",
					trial, h.Fence(), o.Fence(), info.Token)
			}
			hit++
		}
		c.Close()
	}
	t.Logf("TryLock refused %d, waiter claimed %d, waiter gave up %d, violations %d", tryErr, claimed, gaveUp, hit)
	if gaveUp == 0 {
		t.Fatal("in no trial did the waiter give up after the grant was re-entered: the case under test did not arise")
	}
}

const review12Trials = 50
