package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/ops"
	"github.com/redis/go-redis/v9"
)

func watchFlags(e *env) {
	e.fs.StringVar(&e.keyspace, "keyspace", "auto", "keyspace notifications for acquisitions and expiries: auto (when the server sends them), on, off")
}

// runWatch prints events as they happen, until ctx ends.
func runWatch(ctx context.Context, e *env, _ []string) error {
	switch e.keyspace {
	case "auto", "on", "off":
	default:
		return usagef("--keyspace %q: want auto, on or off", e.keyspace)
	}
	if _, err := e.locks(); err != nil { // checks the prefix
		return err
	}
	rdb := e.rdb
	keyspace, why := e.keyspaceOn(ctx, rdb)

	events := make(chan ops.Event, 64)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	var (
		subsMu sync.Mutex // ForEachMaster subscribes from a goroutine per master
		subs   []*redis.PubSub
	)
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		subsMu.Lock()
		for _, ps := range subs { // a blocked read ends when its connection closes
			ps.Close()
		}
		subsMu.Unlock()
		wg.Wait()
	}()
	subscribe := func(ps *redis.PubSub, parse func(prefix, channel, payload string, at time.Time) (ops.Event, bool)) error {
		subsMu.Lock()
		subs = append(subs, ps)
		subsMu.Unlock()
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			return fmt.Errorf("subscribe: %w", unavailable(err))
		}
		wg.Go(func() {
			for {
				m, err := ps.ReceiveMessage(ctx)
				if err != nil {
					if ctx.Err() == nil {
						select {
						case errs <- fmt.Errorf("subscription: %w", unavailable(err)):
						default:
						}
					}
					return
				}
				if ev, ok := parse(e.prefix, m.Channel, m.Payload, time.Now()); ok {
					select {
					case events <- ev:
					case <-ctx.Done():
						return
					}
				}
			}
		})
		return nil
	}
	if err := subscribe(rdb.PSubscribe(ctx, ops.NotificationPatterns(e.prefix)...), ops.ParseNotification); err != nil {
		return err
	}
	if keyspace {
		pattern := ops.KeyspacePattern(e.prefix)
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			// Keyspace notifications stay on the master that stores the key.
			err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				return subscribe(m.PSubscribe(ctx, pattern), ops.ParseKeyspace)
			})
			if err != nil {
				return err
			}
		} else if err := subscribe(rdb.PSubscribe(ctx, pattern), ops.ParseKeyspace); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "watching %s:{*} on %s: releases, grants, leaders%s; a holder's loss is only visible in its own process; ^C to stop\n",
		e.prefix, redact(e.redisURL), why)

	t := newTable(e.stdout,
		column{name: "TIME", width: 12},
		column{name: "EVENT", width: 7},
		column{name: "TYPE", width: 9},
		column{name: "KEY", width: 12, flex: 3},
		column{name: "TOKEN", width: 10},
		column{name: "SOURCE", width: 12},
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case ev := <-events:
			if e.json {
				b, _ := json.Marshal(ev)
				if _, err := fmt.Fprintf(e.stdout, "%s\n", b); err != nil {
					return err
				}
				continue
			}
			t.row(ev.At.UTC().Format("15:04:05.000"), ev.Event, ev.Type, ev.Key, ops.ShortToken(ev.Token), ev.Source)
		}
	}
}

// keyspaceOn decides whether to subscribe to keyspace notifications, and
// says why for the banner.
func (e *env) keyspaceOn(ctx context.Context, rdb redis.UniversalClient) (bool, string) {
	switch e.keyspace {
	case "on":
		return true, ", acquisitions and expiries (keyspace notifications, --keyspace on)"
	case "off":
		return false, "; not acquisitions or expiries (--keyspace off)"
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := rdb.ConfigGet(cctx, "notify-keyspace-events").Result()
	if err != nil {
		return false, fmt.Sprintf("; not acquisitions or expiries (cannot read notify-keyspace-events: %v)", err)
	}
	setting := v["notify-keyspace-events"]
	if !ops.KeyspaceEnabled(setting) {
		return false, fmt.Sprintf("; not acquisitions or expiries (notify-keyspace-events is %q, they need K$x or KA)", setting)
	}
	return true, ", acquisitions and expiries (keyspace notifications)"
}

// unavailable marks a Redis error of the command's own subscriptions.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", core.ErrUnavailable, err)
}
