package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
)

// mapBackend is the smallest Backend: leases in a map, no capabilities.
// It is what "writing a backend" in the Backend docs asks for, and the
// conformance suite runs it.
type mapBackend struct {
	mu     sync.Mutex
	leases map[string]mapLease
	fences map[string]int64 // never deleted with the lease (rule 2)
	closed bool
}

type mapLease struct {
	token, meta string
	fence       int64
	expires     time.Time
}

func newMapBackend() *mapBackend {
	return &mapBackend{leases: map[string]mapLease{}, fences: map[string]int64{}}
}

func (m *mapBackend) Capabilities() core.Capability { return 0 }

func (m *mapBackend) Acquire(_ context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	cur, held := m.leases[req.Key]
	if held && now.Before(cur.expires) {
		if cur.token != req.Token {
			return core.AcquireResult{HolderTTL: cur.expires.Sub(now)}, nil
		}
		cur.expires = later(cur.expires, now.Add(req.TTL)) // rule 4
		m.leases[req.Key] = cur
		return core.AcquireResult{Acquired: true, Fence: cur.fence}, nil
	}
	m.fences[req.Key]++
	f := m.fences[req.Key]
	m.leases[req.Key] = mapLease{token: req.Token, meta: req.Metadata, fence: f, expires: now.Add(req.TTL)}
	return core.AcquireResult{Acquired: true, Fence: f}, nil
}

func (m *mapBackend) Extend(_ context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	cur, ok := m.leases[key]
	if !ok || cur.token != token || !now.Before(cur.expires) {
		return 0, core.ErrNotHeld
	}
	cur.expires = later(cur.expires, now.Add(ttl))
	m.leases[key] = cur
	return cur.expires.Sub(now), nil
}

func (m *mapBackend) Release(_ context.Context, key, token string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.leases[key]
	if !ok || cur.token != token || !time.Now().Before(cur.expires) {
		return false, nil
	}
	delete(m.leases, key)
	return true, nil
}

func (m *mapBackend) Inspect(_ context.Context, key string) (core.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	info := core.Info{Fence: m.fences[key]}
	if cur, ok := m.leases[key]; ok && now.Before(cur.expires) {
		info.Held, info.Token, info.Metadata, info.TTL = true, cur.token, cur.meta, cur.expires.Sub(now)
	}
	return info, nil
}

func (m *mapBackend) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func TestNewConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T) *core.Client {
		c, err := core.New(newMapBackend())
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// declaresNotify claims CapNotify without implementing Notifier.
type declaresNotify struct{ *mapBackend }

func (declaresNotify) Capabilities() core.Capability { return core.CapNotify | core.CapClaims }

func TestNewRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		b    core.Backend
		opts []core.Option
	}{
		"nil backend":                {nil, nil},
		"capability without methods": {declaresNotify{newMapBackend()}, nil},
		"replica ack":                {newMapBackend(), []core.Option{core.WithReplicaAck(1, time.Second)}},
		"bad option":                 {newMapBackend(), []core.Option{core.WithKeyPrefix("")}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := core.New(tc.b, tc.opts...)
			if !errors.Is(err, core.ErrInvalidOption) || c != nil {
				t.Fatalf("got %v, %v; want ErrInvalidOption", c, err)
			}
		})
	}
}

func TestNewClosesBackend(t *testing.T) {
	m := newMapBackend()
	c, err := core.New(m)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		t.Fatal("Close did not close the backend")
	}
}

func TestCapabilities(t *testing.T) {
	for _, tc := range []struct {
		c    core.Capability
		want string
	}{
		{0, ""},
		{core.CapFair, "fair"},
		{core.CapNotify | core.CapList | core.CapClaims, "notify|list|claims"},
		{core.CapReplicaAck | core.CapPrimitives | 1<<12, "replica-ack|primitives|Capability(0x1000)"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%d: %q, want %q", uint16(tc.c), got, tc.want)
		}
	}
	mem := mustNew(core.NewMemory())
	defer mem.Close()
	if err := mem.Require(core.CapFair | core.CapClaims | core.CapPrimitives); err != nil {
		t.Fatal(err)
	}
	err := mem.Require(core.CapReplicaAck | core.CapFair)
	if !errors.Is(err, core.ErrUnsupported) || err.Error() != "core: not supported by this backend: replica-ack" {
		t.Fatalf("Require: %v", err)
	}
}

// A waiter on a backend without notifications polls: a release in another
// process is found within a few polls, not at the holder's expiry.
func TestNewPolls(t *testing.T) {
	m := newMapBackend()
	a, err := core.New(m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := core.New(m) // another "process" on the same store
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	held, err := a.TryLock(ctx, "poll", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, "poll", core.WithWaitTimeout(30*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil { // a minute-long TTL: only polling gets it in time
		t.Fatal(err)
	}
}

// ExampleNew runs the lock on a Backend written outside core (here the
// map-backed one of this file; see the backends directory for real ones).
func ExampleNew() {
	c, err := core.New(newMapBackend())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println(c.Capabilities() == 0, c.Require(core.CapClaims) != nil)
	err = c.Do(context.Background(), "report", func(ctx context.Context) error {
		fmt.Println("running alone")
		return nil
	})
	fmt.Println(err)
	// Output:
	// true true
	// running alone
	// <nil>
}
