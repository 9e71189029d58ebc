package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislock is github.com/bsm/redislock. Its obtain step is a Lua script.
// The library does not retry by default; waiting here uses LinearBackoff(1 ms)
// (or -retry).
func init() {
	register(driverSpec{
		name:  "redislock",
		order: 10,
		retry: true,
		about: "bsm/redislock; waits with LinearBackoff(1 ms)",
		open:  openRedislock,
	})
}

type redislockDriver struct {
	rdb     *redis.Client
	lc      *redislock.Client
	ttl     time.Duration
	backoff time.Duration
}

func openRedislock(a openArgs) (Driver, error) {
	rdb := newClient(a.addrs[0], a.counter)
	d := &redislockDriver{rdb: rdb, lc: redislock.New(rdb), ttl: a.ttl, backoff: a.retry}
	if d.backoff == 0 {
		d.backoff = time.Millisecond
	}
	return d, nil
}

func (d *redislockDriver) TryAcquire(ctx context.Context, key string) (Held, error) {
	l, err := d.lc.Obtain(ctx, key, d.ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (d *redislockDriver) Acquire(ctx context.Context, key string) (Held, error) {
	opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(d.backoff)}
	l, err := d.lc.Obtain(ctx, key, d.ttl, opt)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (d *redislockDriver) Close() error { return d.rdb.Close() }
