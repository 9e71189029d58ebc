package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// The listener must not take a pool's only connection for good: with one
// connection, a waiter subscribes, and the holder must still release and
// the waiter get the key.
func TestNotifyPoolOfOne(t *testing.T) {
	db := databases[1].open(t)
	opt := table(t, db)
	db.SetMaxOpenConns(1)
	c := newClient(t, db, opt)
	ctx := ctxT(t)
	held, err := c.TryLock(ctx, "one", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "one", core.WithToken("other"), core.WithWaitTimeout(10*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := held.Release(rctx); err != nil {
		t.Fatalf("release with a pool of one connection: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}
