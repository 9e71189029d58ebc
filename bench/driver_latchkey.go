//go:build !nolatchkey

package main

import (
	"context"
	"errors"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// latchkey is this repository's lock (package core) with its defaults apart
// from the TTL: auto-renewal on, waiting woken by a pub/sub release notice.
// The variants are diagnostic rows, run only when named in -drivers.
func init() {
	register(driverSpec{
		name:  "latchkey",
		order: 30,
		about: "latchkey core: TryLock / Lock (pub/sub wake-up), auto-renew on",
		open:  latchkeyOpener(),
	})
	register(driverSpec{
		name:     "latchkey-norenew",
		order:    31,
		optional: true,
		about:    "latchkey core with WithAutoRenew(false)",
		open:     latchkeyOpener(core.WithAutoRenew(false)),
	})
	register(driverSpec{
		name:     "latchkey-fair",
		order:    32,
		optional: true,
		about:    "latchkey core with WithFair(): FIFO queue, release grants to the head waiter",
		open:     latchkeyOpener(core.WithFair()),
	})
	register(driverSpec{
		name:     "latchkey-redlock5",
		order:    33,
		nodes:    5,
		optional: true,
		about:    "latchkey core.NewRedlock over 5 nodes",
		open:     openLatchkeyRedlock,
	})
}

func openLatchkeyRedlock(a openArgs) (Driver, error) {
	var nodes []redis.UniversalClient
	var clients []*redis.Client
	for _, addr := range a.addrs {
		c := newClient(addr, a.counter)
		clients = append(clients, c)
		nodes = append(nodes, c)
	}
	c, err := core.NewRedlock(nodes, core.WithTTL(a.ttl))
	if err != nil {
		return nil, err
	}
	return &latchkeyDriver{rdb: clients[0], extra: clients[1:], c: c}, nil
}

func latchkeyOpener(opts ...core.Option) func(openArgs) (Driver, error) {
	return func(a openArgs) (Driver, error) {
		rdb := newClient(a.addrs[0], a.counter)
		c, err := core.NewRedis(rdb, append([]core.Option{core.WithTTL(a.ttl)}, opts...)...)
		if err != nil {
			return nil, err
		}
		return &latchkeyDriver{rdb: rdb, c: c}, nil
	}
}

type latchkeyDriver struct {
	rdb   *redis.Client
	extra []*redis.Client // Redlock's other nodes
	c     *core.Client
}

func (d *latchkeyDriver) TryAcquire(ctx context.Context, key string) (Held, error) {
	l, err := d.c.TryLock(ctx, key)
	if errors.Is(err, core.ErrNotAcquired) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (d *latchkeyDriver) Acquire(ctx context.Context, key string) (Held, error) {
	l, err := d.c.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (d *latchkeyDriver) Close() error {
	err := d.c.Close()
	for _, rdb := range append([]*redis.Client{d.rdb}, d.extra...) {
		if cerr := rdb.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
