package sqllock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// Rule 3: a late Release of a deposed holder never touches its successor,
// whose token differs from the deposed one only in case.
func TestLateReleaseOtherCase(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			opt := table(t, db)
			a := newClient(t, db, opt)
			b := newClient(t, d.open(t), opt)
			ctx := ctxT(t)
			old, err := a.TryLock(ctx, "case", core.WithToken("Worker-1"), core.WithTTL(200*time.Millisecond), core.WithAutoRenew(false))
			if err != nil {
				t.Fatal(err)
			}
			<-old.Lost()
			var cur *core.Lock
			for cur == nil {
				cur, err = b.TryLock(ctx, "case", core.WithToken("worker-1"), core.WithTTL(time.Minute))
				if err != nil && !errors.Is(err, core.ErrNotAcquired) {
					t.Fatal(err)
				}
			}
			defer cur.Release(ctx)
			_ = old.Release(ctx) // late: deposed
			info, err := b.Inspect(ctx, "case")
			if err != nil {
				t.Fatal(err)
			}
			if !info.Held || info.Token != "worker-1" {
				t.Fatalf("the deposed holder's release freed its successor's lease: %+v", info)
			}
		})
	}
}
