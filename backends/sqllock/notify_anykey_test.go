package sqllock_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// A key of any bytes — here invalid UTF-8 and a NUL — is woken by its
// release's notification like any other (see TestNotifyWakesOtherProcess).
func TestNotifyAnyKey(t *testing.T) {
	for _, key := range []string{"\xff\xfe", "a\x00b"} {
		db := databases[1].open(t)
		opt := table(t, db)
		a := newClient(t, db, opt)
		b := newClient(t, databases[1].open(t), opt)
		ctx := ctxT(t)
		held, err := a.TryLock(ctx, key, core.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := b.Lock(ctx, key, core.WithRetryBudget(2), core.WithWaitTimeout(20*time.Second))
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("key %q: the waiter was not woken by the release: %v", key, err)
		}
		if w := time.Since(start); w > time.Second {
			t.Fatalf("key %q: the waiter got the key %v after the release", key, w)
		}
	}
}
