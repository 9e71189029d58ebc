package core

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestShardOwnSunsubscribeIsNoMove: the sweep unsubscribes an idle channel
// (under notifier.mu), and a waiter of that key joins again before the
// receive loop has read the SUNSUBSCRIBE's reply. The loop must not take
// the Client's own reply for a master that gave the slot up: that would
// close the whole connection and move every channel on it, and nothing on
// that master would be heard for shardMoveWait and more. (An adversarial
// review's finding; it failed before.)
func TestShardOwnSunsubscribeIsNoMove(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "lkreview"
	holder := mustNew(NewRedis(srv.Client(t), WithKeyPrefix(prefix), WithShardedNotify(true)))
	defer holder.Close()
	c := mustNew(NewRedis(rdb, WithKeyPrefix(prefix), WithShardedNotify(true)))
	defer c.Close()
	b := c.be.(*redisBackend)
	var ha *Lock
	for _, k := range []string{"a", "b"} {
		h, err := holder.TryLock(ctx, k, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if k == "a" {
			ha = h
		}
	}
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan struct{})
	var aAt time.Time
	go func() {
		defer close(adone)
		if l, err := c.Lock(actx, "a", WithWaitTimeout(30*time.Second)); err == nil {
			aAt = time.Now()
			_ = l.Release(ctx)
		}
	}()
	defer func() { acancel(); <-adone }()
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Lock(ctx, "b", WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("b: %v", err)
	}
	aLease, bLease := c.names("a").lease, c.names("b").lease
	b.ps.shard.mu.Lock()
	sc := b.ps.shard.nodes[""]
	b.ps.shard.mu.Unlock()
	if sc == nil {
		t.Fatal("no shard connection")
	}

	// What the sweeper does, while a message is being delivered (the loop
	// waits for notifier.mu) and a join of "b" waits for notifier.mu too
	// and gets it first.
	c.nt.mu.Lock()
	if err := rdb.SPublish(ctx, aLease, "l:x").Err(); err != nil { // for observers only
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the loop is in deliver
	delete(c.nt.chans, bLease)
	b.unsubscribe(bLease) // the sweep
	c.nt.chans[bLease] = &channelState{ready: make(chan struct{}), subscribed: true}
	c.nt.mu.Unlock()
	if err := b.subscribe(ctx, bLease); err != nil { // the join's SSUBSCRIBE
		t.Fatal(err)
	}

	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	b.ps.shard.mu.Lock()
	now := b.ps.shard.nodes[""]
	moving := len(b.ps.shard.moving)
	b.ps.shard.mu.Unlock()
	if now != sc || moving > 0 {
		t.Errorf("the shard connection was closed and its channels moved (%d moving) after the Client's own SUNSUBSCRIBE", moving)
	}
	select {
	case <-adone:
	case <-time.After(10 * time.Second):
	}
	if d := aAt.Sub(released); d > 200*time.Millisecond {
		t.Errorf("the waiter of \"a\" (same connection, not swept) had the lock %v after its release", d.Round(time.Millisecond))
	}
}

// sweepAfterJoin runs once, after the first fair acquisition script that
// queued the waiter (named), what a sweep tick and a release do in the
// window before the waiter's join: the key's lingering subscription is
// swept, then the holder releases (a grant to the waiter).
type sweepAfterJoin struct {
	armed atomic.Bool
	hash  string
	then  func()
}

func (h *sweepAfterJoin) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sweepAfterJoin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *sweepAfterJoin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 1 && (a[0] == "evalsha" || a[0] == "eval") && a[1] == h.hash && h.armed.CompareAndSwap(true, false) {
			h.then()
		}
		return err
	}
}

// TestShardSweptTwinKeepsNamedGrant: a fair waiter's first attempt finds
// the key's channel (and so its grant twin) subscribed, lingering from an
// earlier wait; a sweep tick drops that subscription before the waiter
// joins, and a grant comes meanwhile. On the classic grant channel (never
// swept) the grant is kept for the waiter (notifier.early); on the swept
// twin it is lost, so a sharded waiter must not count on it (heard needs
// waiters on the channel) and re-attempts after its join instead of
// waiting for its touch pace. (An adversarial review's finding; it failed
// before.)
func TestShardSweptTwinKeepsNamedGrant(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "sharded"}[sharded], func(t *testing.T) {
			srv := redistest.StartServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := "lkreview"
			holder := mustNew(NewRedis(srv.Client(t), WithKeyPrefix(prefix), WithShardedNotify(sharded)))
			defer holder.Close()
			rdb := srv.Client(t)
			hook := &sweepAfterJoin{hash: classicScripts.acquireFair.Hash()}
			if sharded {
				hook.hash = shardedScripts.acquireFair.Hash()
			}
			rdb.AddHook(hook)
			c := mustNew(NewRedis(rdb, WithKeyPrefix(prefix), WithShardedNotify(sharded)))
			defer c.Close()
			h, err := holder.TryLock(ctx, "k", WithFair(), WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			// An earlier wait leaves the key's channel subscribed, lingering.
			if _, err := c.Lock(ctx, "k", WithFair(), WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("first wait: %v", err)
			}
			hook.then = func() {
				c.nt.sweep(time.Now().Add(time.Hour)) // the lingering channel is idle long enough
				if err := h.Release(ctx); err != nil {
					t.Error(err)
				}
			}
			hook.armed.Store(true)
			start := time.Now()
			l, err := c.Lock(ctx, "k", WithFair(), WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			_ = l.Release(ctx)
			if took > time.Second {
				t.Errorf("the waiter had the lock %v after its grant", took.Round(time.Millisecond))
			}
		})
	}
}

// failProbe makes every SPUBLISH sent as a command (the Client's probe,
// not the scripts') fail as a timeout would.
type failProbe struct{}

func (failProbe) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failProbe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (failProbe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "spublish" {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return next(ctx, cmd)
	}
}

// TestShardUndecidedProbeFallsBack: WithShardedNotify(true) on a server
// without sharded pub/sub (miniredis, as Redis before 7) whose probe could
// not tell (it timed out): the SSUBSCRIBE is refused, and the Client then
// subscribes the key classic, for good, so the release still wakes its
// waiter, default mode and fair.
func TestShardUndecidedProbeFallsBack(t *testing.T) {
	t.Cleanup(SetStarvationThreshold(time.Hour))
	_, rdb := redistest.Miniredis(t, true)
	rdb.AddHook(failProbe{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := mustNew(NewRedis(rdb, WithKeyPrefix("lkprobe"), WithShardedNotify(true)))
	defer holder.Close()
	c := mustNew(NewRedis(rdb, WithKeyPrefix("lkprobe"), WithShardedNotify(true)))
	defer c.Close()
	for i, fair := range []bool{false, true} {
		key := "k" + strconv.Itoa(i)
		var lo []LockOption
		if fair {
			lo = append(lo, WithFair())
		}
		h, err := holder.TryLock(ctx, key, append(lo, WithTTL(time.Minute))...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = h.Release(ctx)
		}()
		start := time.Now()
		l, err := c.Lock(ctx, key, append(lo, WithWaitTimeout(5*time.Second))...)
		if err != nil {
			t.Fatalf("fair %v: %v", fair, err)
		}
		_ = l.Release(ctx)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("fair %v: the waiter had the lock %v after it began (released at 300 ms)", fair, d.Round(time.Millisecond))
		}
	}
	if m := c.be.(*redisBackend).ps.mode.Load(); m != shardOff {
		t.Errorf("mode %d, want classic (%d)", m, shardOff)
	}
}
