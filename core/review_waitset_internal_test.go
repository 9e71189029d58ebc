package core

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// A queued waiter that gives up while a grant to it is pending (its wait
// timeout fires just as the key is handed to it) passes the grant on with
// its leave, and its Client forgets it: it is no longer one of the tokens
// the Client's touches of the key name (else every such waiter would stay
// in the Client's waits for good, and every later touch of the key would
// carry it).
func TestReviewGrantedWaiterGivingUpIsForgotten(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := t.Context()
	c := mustNew(NewRedis(rdb, WithKeyPrefix(prefix)))
	defer c.Close()
	b := c.be.(*redisBackend)
	n := c.names("k")

	holder, err := c.TryLock(ctx, "k", WithFair(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const tok = "giving-up"
	r, err := b.acquire(ctx, n, tok, tok, time.Minute, true, true)
	if err != nil || r.acquired {
		t.Fatalf("the waiter's attempt: %+v, %v", r, err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, n.lease).Val(); v != tok+"|" {
		t.Fatalf("lease %q after the release, want the grant %q", v, tok+"|")
	}
	c.leaveQueue(ctx, n, tok) // the waiter gives up: the grant is released
	if rdb.Exists(ctx, n.lease).Val() != 0 {
		t.Fatal("the grant was not passed on")
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if kw := b.waits[n.lease]; kw != nil {
		if _, ok := kw.tokens[tok]; ok {
			t.Fatalf("the Client still counts the waiter that gave up as queued: %v", kw.tokens)
		}
	}
}
