package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// The store must keep a lease at least its TTL after it received the
// request (rule 1 of core.Backend): the holder counts the TTL from its send
// and, with WithDriftMargin(0), believes until exactly then. Redis's own
// expiry (SET PX) frees a key only once its millisecond clock is past the
// expiry, which is never before the TTL ran out. These tests take a lease,
// spin a second caller until it gets the key, and check that it got it no
// earlier than the TTL after the first request was sent — for a mutex, a
// permit and a read hold (both kept in sorted sets scored by the server's
// clock in whole milliseconds).
func TestExpiryNotBeforeTTL(t *testing.T) {
	const ttl = 30 * time.Millisecond
	type take func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error)
	cases := []struct {
		name         string
		first, other take
	}{
		{"mutex",
			func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
				return c.TryLock(ctx, key, opts...)
			},
			func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
				return c.TryLock(ctx, key, opts...)
			}},
		{"permit",
			func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
				return c.Semaphore(key, 1).TryAcquire(ctx, opts...)
			},
			func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
				return c.Semaphore(key, 1).TryAcquire(ctx, opts...)
			}},
		{"read hold",
			func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
				return c.RWMutex(key).TryRLock(ctx, opts...)
			},
			func(ctx context.Context, c *core.Client, key string, opts ...core.LockOption) (*core.Lock, error) {
				return c.RWMutex(key).TryLock(ctx, opts...)
			}},
	}
	rdb, prefix := sharedRedis(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithAutoRenew(false), core.WithDriftMargin(0))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			early := 0
			const rounds = 20
			for i := range rounds {
				key := tc.name + ":" + time.Now().Format("150405.000000")
				sent := time.Now()
				h, err := tc.first(ctx, c, key, core.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				believed := sent.Add(ttl)
				var got time.Time
				for {
					h2, err := tc.other(ctx, c, key, core.WithTTL(time.Second))
					if err == nil {
						got = time.Now()
						_ = h2.Release(ctx)
						break
					}
					if !errors.Is(err, core.ErrNotAcquired) {
						t.Fatal(err)
					}
					if time.Since(sent) > 2*time.Second {
						t.Fatal("the key was never freed")
					}
				}
				_ = h.Release(ctx)
				if got.Before(believed) {
					early++
					t.Logf("round %d: taken by another %v before the first holder's TTL ran out (counted from its send)",
						i, believed.Sub(got))
				}
			}
			if early > 0 {
				t.Errorf("%d of %d rounds: the store let another caller in before the TTL had passed since the holder's request", early, rounds)
			}
		})
	}
}
