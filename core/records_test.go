package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/records"
	"github.com/redis/go-redis/v9"
)

func TestRecords(t *testing.T) {
	clients := map[string]func(t *testing.T) *core.Client{
		"memory": func(t *testing.T) *core.Client { return core.NewMemory() },
		"miniredis": func(t *testing.T) *core.Client {
			_, rdb := startMiniredis(t)
			return core.NewRedis(rdb)
		},
		"redlock": func(t *testing.T) *core.Client {
			var nodes []redis.UniversalClient
			for i := 0; i < 3; i++ {
				_, rdb := startMiniredis(t)
				nodes = append(nodes, rdb)
			}
			return core.NewRedlock(nodes)
		},
	}
	for name, newClient := range clients {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			defer c.Close()
			ctx := context.Background()
			store := records.Of(c)
			if store == nil {
				t.Fatal("no record store for a *core.Client")
			}
			if _, ok, err := store.Get(ctx, "r"); ok || err != nil {
				t.Fatalf("Get of a missing record: %v %v", ok, err)
			}
			if err := store.Set(ctx, "r", "v1", time.Minute); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := store.Get(ctx, "r"); v != "v1" || !ok || err != nil {
				t.Fatalf("Get: %q %v %v", v, ok, err)
			}
			first, err := store.Claim(ctx, "tick", "a", 200*time.Millisecond)
			if err != nil || !first {
				t.Fatalf("first claim: %v %v", first, err)
			}
			again, err := store.Claim(ctx, "tick", "b", time.Minute)
			if err != nil || again {
				t.Fatalf("second claim: %v %v", again, err)
			}
			time.Sleep(400 * time.Millisecond)
			if ok, err := store.Claim(ctx, "tick", "c", time.Minute); !ok || err != nil {
				t.Fatalf("claim after expiry: %v %v", ok, err)
			}
			if err := store.Set(ctx, "", "v", time.Minute); err == nil {
				t.Fatal("empty key accepted")
			}
		})
	}
	if records.Of("not a client") != nil {
		t.Fatal("record store for a non-client")
	}
}
