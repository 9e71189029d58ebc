package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// recordClients are the backends the record tests run on.
func recordClients() map[string]func(t *testing.T) *core.Client {
	return map[string]func(t *testing.T) *core.Client{
		"memory": func(t *testing.T) *core.Client { return mustNew(core.NewMemory()) },
		"miniredis": func(t *testing.T) *core.Client {
			_, rdb := startMiniredis(t)
			return mustNew(core.NewRedis(rdb))
		},
		"redlock": func(t *testing.T) *core.Client {
			var nodes []redis.UniversalClient
			for i := 0; i < 3; i++ {
				_, rdb := startMiniredis(t)
				nodes = append(nodes, rdb)
			}
			return mustNew(core.NewRedlock(nodes))
		},
		"redis": func(t *testing.T) *core.Client {
			rdb := redistest.Client(t) // skips (or fails) without a Redis
			return mustNew(core.NewRedis(rdb, core.WithKeyPrefix(redistest.Prefix(t, rdb))))
		},
	}
}

func TestRecords(t *testing.T) {
	for name, newClient := range recordClients() {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			defer c.Close()
			ctx := context.Background()
			store := c.Records()
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
}

// TestRecordClaimWithin: a claim is refused as late, distinctly from
// taken, when it arrives after planned + window by the store's clock; a
// claim in time lives until the window ends even when its TTL is shorter,
// so no later claim of the same key can succeed.
func TestRecordClaimWithin(t *testing.T) {
	for name, newClient := range recordClients() {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			defer c.Close()
			ctx := context.Background()
			store := c.Records()
			now := time.Now()

			if v, err := store.ClaimWithin(ctx, "late", "a", time.Minute, now.Add(-2*time.Second), time.Second); v != core.ClaimLate || err != nil {
				t.Fatalf("claim 2 s after its instant, window 1 s: %v %v, want late", v, err)
			}
			if _, ok, err := store.Get(ctx, "late"); ok || err != nil {
				t.Fatalf("a late claim stored something: %v %v", ok, err)
			}

			// A TTL far shorter than the window: the claim still covers it.
			if v, err := store.ClaimWithin(ctx, "tick", "a", 10*time.Millisecond, now, 500*time.Millisecond); v != core.Claimed || err != nil {
				t.Fatalf("first claim: %v %v", v, err)
			}
			time.Sleep(150 * time.Millisecond)
			if v, err := store.ClaimWithin(ctx, "tick", "b", 10*time.Millisecond, now, 500*time.Millisecond); v != core.ClaimTaken || err != nil {
				t.Fatalf("claim within the window after the TTL: %v %v, want taken", v, err)
			}
			if got, _, _ := store.Get(ctx, "tick"); got != "a" {
				t.Fatalf("claim holds %q, want a", got)
			}
			time.Sleep(time.Until(now.Add(700 * time.Millisecond)))
			if v, err := store.ClaimWithin(ctx, "tick", "c", time.Minute, now, 500*time.Millisecond); v != core.ClaimLate || err != nil {
				t.Fatalf("claim after the window: %v %v, want late", v, err)
			}

			if _, err := store.ClaimWithin(ctx, "bad", "a", time.Minute, now, -time.Second); !errors.Is(err, core.ErrInvalidTTL) {
				t.Fatalf("negative window: %v, want ErrInvalidTTL", err)
			}
			if _, err := store.ClaimWithin(ctx, "bad", "a", 0, now, time.Second); !errors.Is(err, core.ErrInvalidTTL) {
				t.Fatalf("zero TTL: %v, want ErrInvalidTTL", err)
			}
		})
	}
}

// TestRecordClaimWithinRedlockClocks: on Redlock each node judges a claim
// by its own clock, and a majority decides.
func TestRecordClaimWithinRedlockClocks(t *testing.T) {
	planned := time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		clocks []time.Duration // each node's TIME, after planned
		want   core.ClaimVerdict
	}{
		{"all-in-time", []time.Duration{0, 0, 0}, core.Claimed},
		{"one-node-late", []time.Duration{0, 0, 5 * time.Second}, core.Claimed},
		{"two-nodes-late", []time.Duration{0, 5 * time.Second, 5 * time.Second}, core.ClaimLate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var nodes []redis.UniversalClient
			for _, off := range tt.clocks {
				mr, rdb := redistest.Miniredis(t, false)
				mr.SetTime(planned.Add(off))
				nodes = append(nodes, rdb)
			}
			c := mustNew(core.NewRedlock(nodes))
			defer c.Close()
			store := c.Records()
			ctx := context.Background()
			v, err := store.ClaimWithin(ctx, "tick", "a", time.Minute, planned, time.Second)
			if v != tt.want || err != nil {
				t.Fatalf("claim: %v %v, want %v", v, err, tt.want)
			}
			if v == core.Claimed {
				if v, err := store.ClaimWithin(ctx, "tick", "b", time.Minute, planned, time.Second); v != core.ClaimTaken || err != nil {
					t.Fatalf("second claim: %v %v, want taken", v, err)
				}
			}
			for i, rdb := range nodes { // a refused claim leaves nothing behind
				n, _ := rdb.(*redis.Client).DBSize(ctx).Result()
				if tt.want == core.ClaimLate && n != 0 {
					t.Errorf("node %d holds %d keys after a late claim", i, n)
				}
			}
		})
	}
}

// TestRecordSetIfNewer: a record with a lower order never replaces one
// with a higher order; equal orders replace; the record expires with its
// order.
func TestRecordSetIfNewer(t *testing.T) {
	for name, newClient := range recordClients() {
		t.Run(name, func(t *testing.T) {
			c := newClient(t)
			defer c.Close()
			ctx := context.Background()
			store := c.Records()
			steps := []struct {
				value  string
				order  int64
				stored bool
				holds  string
			}{
				{"start-1", 1000, true, "start-1"},
				{"start-2", 2000, true, "start-2"},
				{"end-1", 1000, false, "start-2"}, // a late end of an older run
				{"end-2", 2000, true, "end-2"},
				{"start-3", 2_000_000_000_000, true, "start-3"},
				{"end-2-again", 2000, false, "start-3"},
			}
			for _, s := range steps {
				stored, err := store.SetIfNewer(ctx, "last", s.value, s.order, time.Minute)
				if err != nil || stored != s.stored {
					t.Fatalf("SetIfNewer(%q, %d): %v %v, want %v", s.value, s.order, stored, err, s.stored)
				}
				if v, ok, err := store.Get(ctx, "last"); v != s.holds || !ok || err != nil {
					t.Fatalf("after %q: record %q %v %v, want %q", s.value, v, ok, err, s.holds)
				}
			}
			// Record and order expire together: an older order may write again.
			if _, err := store.SetIfNewer(ctx, "short", "new", 5, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if stored, err := store.SetIfNewer(ctx, "short", "old", 1, time.Minute); !stored || err != nil {
				t.Fatalf("SetIfNewer after expiry: %v %v", stored, err)
			}
			if _, err := store.SetIfNewer(ctx, "", "v", 1, time.Minute); err == nil {
				t.Fatal("empty key accepted")
			}
			if _, err := store.SetIfNewer(ctx, "k", "v", 1, 0); !errors.Is(err, core.ErrInvalidTTL) {
				t.Fatalf("zero TTL: %v, want ErrInvalidTTL", err)
			}
		})
	}
}
