package core

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
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

// blockTouch holds every queue_touch call sent while armed until release
// is closed.
type blockTouch struct {
	armed   atomic.Bool
	release chan struct{}
	sent    chan struct{} // one per held call, when it is held
}

func (h *blockTouch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *blockTouch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); h.armed.Load() && len(args) > 1 && args[0] == "evalsha" && args[1] == queueTouchScript.Hash() {
			h.sent <- struct{}{}
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *blockTouch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// While one waiter's touch is on its way, another waiter of the same
// Client and key does not read the previous touch's answer as if it had
// just been given: measured from that answer, the holder it saw has
// expired, so the waiter asks itself (and finds the key free) instead of
// sleeping on a holder's time that has run out.
func TestReviewTouchInFlightIsNoAnswer(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	ctx := t.Context()
	a := mustNew(NewRedis(rdb, WithKeyPrefix(prefix)))
	defer a.Close()
	wrdb := redistest.Client(t)
	hook := &blockTouch{release: make(chan struct{}), sent: make(chan struct{}, 1)}
	wrdb.AddHook(hook)
	c := mustNew(NewRedis(wrdb, WithKeyPrefix(prefix)))
	defer c.Close()
	b := c.be.(*redisBackend)
	n := c.names("k")

	if _, err := a.TryLock(ctx, "k", WithFair(), WithTTL(time.Second), WithAutoRenew(false)); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"waiter-a", "waiter-b"} {
		if r, err := b.acquire(ctx, n, tok, tok, time.Minute, true, true); err != nil || r.acquired {
			t.Fatalf("%s's attempt: %+v, %v", tok, r, err)
		}
	}
	ttl, attempt, err := b.touch(ctx, n, "waiter-a")
	if err != nil || attempt || ttl <= 0 || ttl > time.Second {
		t.Fatalf("first touch: %v, %v, %v; want the holder's time left, no attempt", ttl, attempt, err)
	}
	time.Sleep(ttl + 300*time.Millisecond) // the holder it saw has expired
	if rdb.Exists(ctx, n.lease).Val() != 0 {
		t.Fatal("the holder's lease did not expire")
	}

	hook.armed.Store(true)
	done := make(chan struct{})
	go func() { // waiter a's next touch, held on its way
		defer close(done)
		_, _, _ = b.touch(ctx, n, "waiter-a")
	}()
	<-hook.sent
	hook.armed.Store(false)
	ttl, attempt, err = b.touch(ctx, n, "waiter-b")
	close(hook.release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if !attempt {
		t.Errorf("waiter b was told to wait %v more for a holder whose lease expired; want an attempt", ttl)
	}
	for _, tok := range []string{"waiter-a", "waiter-b"} {
		c.leaveQueue(ctx, n, tok)
	}
}
