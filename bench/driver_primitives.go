//go:build !nolatchkey

package main

import (
	"context"
	"errors"

	"github.com/latchkey/latchkey/core"
)

// The latchkey primitives other than the mutex, each behind the Driver
// interface so that every scenario runs them unchanged. Each driver opens
// one core.Client as the latchkey driver does (WithTTL, auto-renewal on).
// They are left out of the lock matrix; -primitives runs them next to raw.
//
// A driver's key is the primitive's key; lockall3 turns it into three.
func init() {
	for i, p := range []struct {
		name     string
		capacity int
		about    string
		try      func(ctx context.Context, c *core.Client, key string) (Held, error)
		wait     func(ctx context.Context, c *core.Client, key string) (Held, error)
	}{
		{
			name: "latchkey-sem4", capacity: semLimit,
			about: "Semaphore(key, 4): TryAcquire / Acquire of one permit",
			try: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.Semaphore(key, semLimit).TryAcquire(ctx))
			},
			wait: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.Semaphore(key, semLimit).Acquire(ctx))
			},
		},
		{
			name: "latchkey-rw-read", capacity: -1,
			about: "RWMutex(key): TryRLock / RLock, a read hold (readers share the lock)",
			try: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.RWMutex(key).TryRLock(ctx))
			},
			wait: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.RWMutex(key).RLock(ctx))
			},
		},
		{
			name:  "latchkey-rw-write",
			about: "RWMutex(key): TryLock / Lock, the write hold",
			try: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.RWMutex(key).TryLock(ctx))
			},
			wait: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.RWMutex(key).Lock(ctx))
			},
		},
		{
			name:  "latchkey-lockall3",
			about: "TryLockAll / LockAll of 3 keys sharing a hash tag ({key}:a, {key}:b, {key}:c)",
			try: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return heldGroup(c.TryLockAll(ctx, groupKeys(key, true)))
			},
			wait: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return heldGroup(c.LockAll(ctx, groupKeys(key, true)))
			},
		},
		{
			name:  "latchkey-lockall3-notag",
			about: "TryLockAll / LockAll of 3 keys with no tag in common (key:a, key:b, key:c)",
			try: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return heldGroup(c.TryLockAll(ctx, groupKeys(key, false)))
			},
			wait: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return heldGroup(c.LockAll(ctx, groupKeys(key, false)))
			},
		},
		{
			name:  "latchkey-campaign",
			about: "Campaign(key, value) (one attempt: WithRetryBudget(0) for TryAcquire) / Release",
			try: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.Campaign(ctx, key, campaignValue, core.WithRetryBudget(0)))
			},
			wait: func(ctx context.Context, c *core.Client, key string) (Held, error) {
				return held(c.Campaign(ctx, key, campaignValue))
			},
		},
	} {
		open := latchkeyOpener()
		register(driverSpec{
			name:      p.name,
			order:     40 + i,
			primitive: true,
			capacity:  p.capacity,
			about:     p.about,
			open: func(a openArgs) (Driver, error) {
				d, err := open(a)
				if err != nil {
					return nil, err
				}
				return &primitiveDriver{latchkeyDriver: d.(*latchkeyDriver), try: p.try, wait: p.wait}, nil
			},
		})
	}
}

const (
	semLimit      = 4         // permits of the latchkey-sem4 driver
	campaignValue = "lkbench" // what a campaigner announces
)

// groupKeys are the three keys lockall3 takes for key. With tag, each is
// "{key}:x": core stores a key inside the hash tag "{<key>}", and Redis
// takes a tag to end at the first '}', so the three share the tag "{key"
// (one Cluster slot). Without, "key:x" gives each key a tag of its own.
func groupKeys(key string, tag bool) []string {
	if tag {
		key = "{" + key + "}"
	}
	return []string{key + ":a", key + ":b", key + ":c"}
}

type primitiveDriver struct {
	*latchkeyDriver
	try, wait func(ctx context.Context, c *core.Client, key string) (Held, error)
}

func (d *primitiveDriver) TryAcquire(ctx context.Context, key string) (Held, error) {
	h, err := d.try(ctx, d.c, key)
	if errors.Is(err, core.ErrNotAcquired) {
		return nil, errBusy
	}
	return h, err
}

func (d *primitiveDriver) Acquire(ctx context.Context, key string) (Held, error) {
	return d.wait(ctx, d.c, key)
}

// held turns a core result into a Held without a typed nil.
func held(l *core.Lock, err error) (Held, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

func heldGroup(g *core.Group, err error) (Held, error) {
	if err != nil {
		return nil, err
	}
	return groupHeld{g}, nil
}

// groupHeld is a LockAll group. Its fence is the first key's (in sorted
// order): each holder of the group holds that key, so it rises from holder
// to holder as a lock's does.
type groupHeld struct{ g *core.Group }

func (h groupHeld) Release(ctx context.Context) error { return h.g.Release(ctx) }
func (h groupHeld) Fence() int64                      { return h.g.Locks()[0].Fence() }
