package httpidem_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
)

// TestRedisCluster runs every script on a real 3-master Redis Cluster:
// keys of one script share a hash tag, so none fails with CROSSSLOT, and
// many keys spread over all masters.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cc := cluster.Client(t)
	store := must(httpidem.NewRedisStore(cc, httpidem.WithKeyPrefix(prefix(t))))
	defer store.Close()
	ctx := context.Background()

	var c counter
	h := mw(t, httpidem.IdempotencyConfig{Store: store}, &c)
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("order-%d", i)
		first := do(h, "POST", "/orders", "b", withKey(key), withTenant("A"))
		again := do(h, "POST", "/orders", "b", withKey(key), withTenant("A"))
		if first.Code != http.StatusCreated || again.Header().Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("%s: first %d %s, again %d", key, first.Code, first.Body, again.Code)
		}
	}
	if c.n.Load() != 20 {
		t.Fatalf("handler ran %d times, want 20", c.n.Load())
	}

	for _, cfg := range []httpidem.DailyConfig{
		{Scope: "vote", Counted: true},
		{Scope: "read", Mode: httpidem.ModeCount},
		{Scope: "uniq", Mode: httpidem.ModeCount, Approximate: true},
	} {
		cfg.Store = store
		g, err := httpidem.NewGate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for obj := 0; obj < 5; obj++ {
			object := fmt.Sprintf("item-%d", obj)
			for u := 0; u < 4; u++ {
				for rep := 0; rep < 2; rep++ {
					first, err := g.Claim(ctx, fmt.Sprintf("u%d", u), object)
					if err != nil {
						t.Fatalf("%s: %v", cfg.Scope, err)
					}
					if cfg.Approximate {
						continue
					}
					if first != (rep == 0) {
						t.Fatalf("%s %s u%d rep %d: first=%v", cfg.Scope, object, u, rep, first)
					}
				}
			}
			if n, err := g.Count(ctx, object, g.Today()); err != nil || n != 4 {
				t.Fatalf("%s %s: Count %d, %v", cfg.Scope, object, n, err)
			}
		}
		tk, err := g.Take(ctx, "u9", "item-0", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", cfg.Scope, err)
		}
	}
}

// TestRedisClaimExpiry checks the claim's expiry on a real server: the next
// local midnight plus grace, as an absolute EXAT.
func TestRedisClaimExpiry(t *testing.T) {
	rdb := redistest.Client(t)
	p := prefix(t)
	store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(p)))
	defer store.Close()
	defer deleteKeys(rdb, p)
	loc := mustZone(t, "America/Santiago")
	g, err := httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "checkin", Location: loc, Grace: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tk, err := g.Take(ctx, "u1", "", nil)
	if err != nil || !tk.First {
		t.Fatalf("%+v %v", tk, err)
	}
	key := p + ":day:{checkin:" + tk.Day.String() + ":}:s:u1"
	exp, err := rdb.ExpireTime(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := tk.Until.Add(30 * time.Minute).Unix()
	if got := int64(exp / time.Second); got != want {
		t.Fatalf("EXPIRETIME %d, want %d (%v + grace)", got, want, tk.Until)
	}
}
