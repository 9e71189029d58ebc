package main

import (
	"context"
	"errors"
	"math"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsync is github.com/go-redsync/redsync/v4 over go-redis v9 pools. Waiting
// uses the library's retry loop with unlimited tries (the context bounds it)
// and its default delay, rand(50 ms, 250 ms), unless -retry sets a fixed one.
//
// openRedsync works for any number of nodes, so a Redlock variant is one more
// register call: register(driverSpec{name: "redsync5", nodes: 5, retry: true,
// open: openRedsync, ...}).
func init() {
	register(driverSpec{
		name:      "redsync",
		order:     20,
		retry:     true,
		fastRetry: true,
		about:     "go-redsync/redsync/v4, one node; default retry delay 50-250 ms",
		open:      openRedsync,
	})
	register(driverSpec{
		name:      "redsync5",
		order:     21,
		nodes:     5,
		optional:  true,
		retry:     true,
		fastRetry: true,
		about:     "go-redsync/redsync/v4, Redlock over 5 nodes; default retry delay 50-250 ms",
		open:      openRedsync,
	})
}

type redsyncDriver struct {
	clients []*redis.Client
	rs      *redsync.Redsync
	opts    []redsync.Option
}

func openRedsync(a openArgs) (Driver, error) {
	d := &redsyncDriver{}
	var pools []redsyncredis.Pool
	for _, addr := range a.addrs {
		c := newClient(addr, a.counter)
		d.clients = append(d.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	d.rs = redsync.New(pools...)
	d.opts = []redsync.Option{redsync.WithExpiry(a.ttl), redsync.WithTries(math.MaxInt32)}
	if a.retry > 0 {
		d.opts = append(d.opts, redsync.WithRetryDelay(a.retry))
	}
	return d, nil
}

func (d *redsyncDriver) TryAcquire(ctx context.Context, key string) (Held, error) {
	m := d.rs.NewMutex(key, d.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		var re *redsync.RedisError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, errBusy
	}
	return redsyncHeld{m}, nil
}

func (d *redsyncDriver) Acquire(ctx context.Context, key string) (Held, error) {
	m := d.rs.NewMutex(key, d.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (d *redsyncDriver) Close() error { return closeAll(d.clients...) }

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: lock was not held at release")
	}
	return err
}
