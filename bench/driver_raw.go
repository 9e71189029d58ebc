package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// raw is the floor for a correct single-instance lock: SET key token NX PX to
// acquire, a Lua compare-and-delete (EVALSHA) to release, and a fixed poll
// interval (1 ms unless -retry says otherwise) while contended.
func init() {
	register(driverSpec{
		name:  "raw",
		order: 0,
		retry: true,
		about: "SET NX PX + EVALSHA compare-and-delete; polls every 1 ms",
		open:  openRaw,
	})
}

var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

type rawDriver struct {
	rdb  *redis.Client
	ttl  time.Duration
	poll time.Duration
}

func openRaw(a openArgs) (Driver, error) {
	d := &rawDriver{rdb: newClient(a.addrs[0], a.counter), ttl: a.ttl, poll: a.retry}
	if d.poll == 0 {
		d.poll = time.Millisecond
	}
	// Load the script up front so EVALSHA never misses in the measured window.
	if err := rawRelease.Load(context.Background(), d.rdb).Err(); err != nil {
		d.rdb.Close()
		return nil, err
	}
	return d, nil
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

func (d *rawDriver) TryAcquire(ctx context.Context, key string) (Held, error) {
	tok, err := newToken()
	if err != nil {
		return nil, err
	}
	return d.try(ctx, key, tok)
}

func (d *rawDriver) try(ctx context.Context, key, tok string) (Held, error) {
	ok, err := d.rdb.SetNX(ctx, key, tok, d.ttl).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errBusy
	}
	return &rawHeld{d: d, key: key, tok: tok}, nil
}

func (d *rawDriver) Acquire(ctx context.Context, key string) (Held, error) {
	tok, err := newToken()
	if err != nil {
		return nil, err
	}
	for {
		h, err := d.try(ctx, key, tok)
		if !errors.Is(err, errBusy) {
			return h, err
		}
		if err := sleepCtx(ctx, d.poll); err != nil {
			return nil, err
		}
	}
}

func (d *rawDriver) Close() error { return d.rdb.Close() }

type rawHeld struct {
	d   *rawDriver
	key string
	tok string
}

func (h *rawHeld) Release(ctx context.Context) error {
	n, err := rawRelease.Run(ctx, h.d.rdb, []string{h.key}, h.tok).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("raw: lock was not held at release")
	}
	return nil
}
