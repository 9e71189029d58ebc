package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// lateAnswer is a backend whose acquisitions succeed at once but whose
// answers reach the Client delay later, as through a stalled connection.
type lateAnswer struct {
	*mapBackend
	delay time.Duration
}

func (b lateAnswer) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	r, err := b.mapBackend.Acquire(ctx, req)
	time.Sleep(b.delay)
	return r, err
}

// An acquisition whose answer comes after its TTL has run out is no
// lease: the key may have expired and been taken by another caller
// meanwhile (a belief run on etcd saw exactly that through a stalled
// proxy). TryLock and Lock report the backend too slow, hand back no
// lock, and leave the key free. An answer in time still makes a lock.
func TestAnswerAfterTTLIsNoLease(t *testing.T) {
	const ttl = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		delay time.Duration
		lock  func(c *core.Client) (*core.Lock, error)
	}{
		{"TryLock", 300 * time.Millisecond, func(c *core.Client) (*core.Lock, error) {
			return c.TryLock(context.Background(), "k", core.WithTTL(ttl))
		}},
		{"Lock", 300 * time.Millisecond, func(c *core.Client) (*core.Lock, error) {
			return c.Lock(context.Background(), "k", core.WithTTL(ttl), core.WithWaitTimeout(2*time.Second))
		}},
		{"TryLock without renewal", 300 * time.Millisecond, func(c *core.Client) (*core.Lock, error) {
			return c.TryLock(context.Background(), "k", core.WithTTL(ttl), core.WithAutoRenew(false))
		}},
		{"TryLock answered in time", 50 * time.Millisecond, func(c *core.Client) (*core.Lock, error) {
			return c.TryLock(context.Background(), "k", core.WithTTL(ttl))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMapBackend()
			c, err := core.New(lateAnswer{m, tc.delay})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := tc.lock(c)
			if tc.delay < ttl {
				if err != nil {
					t.Fatalf("answered %v into a %v TTL: %v", tc.delay, ttl, err)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				lost := "not lost"
				if l.Err() != nil {
					lost = "already lost"
				}
				t.Fatalf("got a lock (%s) from an answer %v late for a %v TTL", lost, tc.delay, ttl)
			}
			if !errors.Is(err, core.ErrUnavailable) || !errors.Is(err, core.ErrLateAnswer) {
				t.Errorf("err = %v, want ErrUnavailable for a late answer", err)
			}
			// The lease the late answer made is given back.
			deadline := time.Now().Add(2 * time.Second)
			for {
				info, err := m.Inspect(context.Background(), "k")
				if err != nil {
					t.Fatal(err)
				}
				if !info.Held {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the key is still held: %+v", info)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
