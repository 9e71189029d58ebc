package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// A fenced release (release.lua, rw_unlock.lua) tells a lease taken or
// re-entered since from its own by the key's fence counter. A counter that
// expired before its lease (it lived 5 minutes from the last acquisition,
// and renewals left it alone) made a late release delete by token again:
// the review of 2026-11-28 deleted a write hold re-entered under its token
// that way. These tests check that the counter outlives the lease in each
// way a lease can outlast the counter's retention.

// counterOutlives fails the test unless the fence counter of a lease
// lives at least as long as the lease.
func counterOutlives(t *testing.T, rdb *redis.Client, lease, counter string) {
	t.Helper()
	bg := context.Background()
	l, _ := rdb.PTTL(bg, lease).Result()
	c, _ := rdb.PTTL(bg, counter).Result()
	if l <= 0 {
		t.Fatalf("lease %s: pttl %v, want a lease", lease, l)
	}
	if c < l {
		t.Errorf("the fence counter %s expires in %v, before its lease (%v): a late release then deletes by token", counter, c, l)
	}
}

// holdKinds are the leases a fenced release applies to: a mutex lease and
// a write hold, with their storage names under prefix "fk".
var holdKinds = []struct {
	name         string
	lease, fence string
	take         func(c *core.Client, opts ...core.LockOption) (*core.Lock, error)
}{
	{"mutex", "fk:{k}", "fk:{k}:fence", func(c *core.Client, opts ...core.LockOption) (*core.Lock, error) {
		return c.TryLock(context.Background(), "k", opts...)
	}},
	{"write", "fk:{k}:rw", "fk:{k}:rw:fence", func(c *core.Client, opts ...core.LockOption) (*core.Lock, error) {
		return c.RWMutex("k").TryLock(context.Background(), opts...)
	}},
}

func TestFenceCounterOutlivesLease(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	bg := context.Background()
	for _, kind := range holdKinds {
		t.Run(kind.name, func(t *testing.T) {
			cs := redisClients(t, rdb, "fk", 2)
			c, other := cs[0], cs[1]

			// A TTL above the retention, not renewed.
			l, err := kind.take(c, core.WithTTL(10*time.Minute), core.WithAutoRenew(false))
			if err != nil {
				t.Fatal(err)
			}
			counterOutlives(t, rdb, kind.lease, kind.fence)

			// Re-entered under its token by another process with a short
			// TTL: the lease keeps its 10 minutes, and so must the counter.
			r, err := kind.take(other, core.WithToken(l.Token()), core.WithTTL(time.Second), core.WithAutoRenew(false))
			if err != nil {
				t.Fatal(err)
			}
			counterOutlives(t, rdb, kind.lease, kind.fence)
			_ = r.Release(bg)

			// Extended by hand past the retention.
			l, err = kind.take(c, core.WithTTL(time.Minute), core.WithAutoRenew(false))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(bg, 8*time.Minute); err != nil {
				t.Fatal(err)
			}
			counterOutlives(t, rdb, kind.lease, kind.fence)
			if err := l.Release(bg); err != nil {
				t.Fatal(err)
			}
		})
	}
}
