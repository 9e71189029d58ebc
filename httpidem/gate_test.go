package httpidem_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/httpidem"
)

// fakeClock is an injected clock; with a miniredis attached, moving it
// moves the server's clock and ages its keys the same way.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
	mr *miniredis.Miniredis
}

func newFakeClock(t time.Time, mr *miniredis.Miniredis) *fakeClock {
	c := &fakeClock{t: t, mr: mr}
	if mr != nil {
		mr.SetTime(t)
	}
	return c
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	d := t.Sub(c.t)
	c.t = t
	c.mu.Unlock()
	if c.mr != nil {
		c.mr.SetTime(t)
		c.mr.FastForward(d)
	}
}

func TestGateAcrossLocalDays(t *testing.T) {
	cases := []struct {
		name  string
		zone  string
		now   string // first claim, UTC
		day   string // its local day
		until string // the next local midnight, UTC
	}{
		{"spring forward", "America/New_York", "2026-03-08T06:30:00Z", "2026-03-08", "2026-03-09T04:00:00Z"},
		{"fall back", "America/New_York", "2026-11-01T05:30:00Z", "2026-11-01", "2026-11-02T05:00:00Z"},
		{"no midnight (Santiago)", "America/Santiago", "2026-09-06T03:30:00Z", "2026-09-05", "2026-09-06T04:00:00Z"},
		{"UTC+14", "Pacific/Kiritimati", "2025-12-31T10:30:00Z", "2026-01-01", "2026-01-01T10:00:00Z"},
		{"UTC-12", "Etc/GMT+12", "2026-01-01T11:59:00Z", "2025-12-31", "2026-01-01T12:00:00Z"},
		{"Feb 29", "UTC", "2028-02-29T23:59:30Z", "2028-02-29", "2028-03-01T00:00:00Z"},
		{"Dec 31 to Jan 1", "Asia/Tokyo", "2026-12-31T14:59:00Z", "2026-12-31", "2026-12-31T15:00:00Z"},
		// Midnight twice (01:00 back to 00:00): the day ends at the first.
		{"repeated midnight (Amman 2014)", "Asia/Amman", "2014-10-30T20:30:00Z", "2014-10-30", "2014-10-30T21:00:00Z"},
		{"repeated midnight (Amman 2020)", "Asia/Amman", "2020-10-29T20:30:00Z", "2020-10-29", "2020-10-29T21:00:00Z"},
		{"repeated midnight (Gaza 2015)", "Asia/Gaza", "2015-10-22T20:30:00Z", "2015-10-22", "2015-10-22T21:00:00Z"},
		{"repeated midnight (Vostok 2023, 2h)", "Antarctica/Vostok", "2023-12-17T16:30:00Z", "2023-12-17", "2023-12-17T17:00:00Z"},
	}
	const grace = time.Hour
	for _, c := range cases {
		for _, kind := range []string{"memory", "miniredis"} {
			t.Run(c.name+"/"+kind, func(t *testing.T) {
				ctx := context.Background()
				loc := mustZone(t, c.zone)
				now0, until := utc(c.now), utc(c.until)
				var store testStore
				var mr *miniredis.Miniredis
				var clock *fakeClock
				if kind == "memory" {
					clock = newFakeClock(now0, nil)
					s := must(httpidem.NewMemoryStore(httpidem.WithClock(clock.Now)))
					t.Cleanup(func() { s.Close() })
					store = s
				} else {
					m, rdb := startMiniredis(t, false)
					mr = m
					clock = newFakeClock(now0, mr)
					s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix("p")))
					t.Cleanup(func() { s.Close() })
					store = s
				}
				g, err := httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "vote", Location: loc, Clock: clock.Now, Grace: grace})
				if err != nil {
					t.Fatal(err)
				}
				first, err := g.Take(ctx, "u1", "item9", nil)
				if err != nil || !first.First || first.Day.String() != c.day || !first.Until.Equal(until) {
					t.Fatalf("first Take: %+v %v; want day %s until %s", first, err, c.day, c.until)
				}
				dup, err := g.Take(ctx, "u1", "item9", nil)
				if err != nil || dup.First || dup.RetryAfter != until.Sub(now0) {
					t.Fatalf("second Take: %+v %v; want a duplicate with RetryAfter %v", dup, err, until.Sub(now0))
				}
				key := "p:day:{vote:" + c.day + ":item9}:s:u1"
				if mr != nil {
					if !mr.Exists(key) {
						t.Fatalf("claim key %q missing; keys %v", key, mr.Keys())
					}
					if ttl := mr.TTL(key); ttl != until.Add(grace).Sub(now0) {
						t.Fatalf("claim TTL %v, want %v (next local midnight + grace)", ttl, until.Add(grace).Sub(now0))
					}
				}
				clock.Set(until.Add(-time.Second))
				if ok, err := g.Claim(ctx, "u1", "item9"); ok || err != nil {
					t.Fatalf("a second before local midnight: first=%v err=%v", ok, err)
				}
				clock.Set(until)
				next, err := g.Take(ctx, "u1", "item9", nil)
				if err != nil || !next.First || next.Day != first.Day.AddDays(1) {
					t.Fatalf("at local midnight: %+v %v; want a first claim on %v", next, err, first.Day.AddDays(1))
				}
				if mr != nil {
					if !mr.Exists(key) {
						t.Fatal("yesterday's claim expired before its grace period")
					}
					clock.Set(until.Add(grace + time.Second))
					if mr.Exists(key) {
						t.Fatal("yesterday's claim outlived its grace period")
					}
				}
			})
		}
	}
}

func TestGateClaimsOncePerSubjectAndObject(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		ctx := context.Background()
		g, err := httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "vote", Counted: true})
		if err != nil {
			t.Fatal(err)
		}
		const n = 50
		var firsts atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := g.Claim(ctx, "u1", "item:9")
				if err != nil {
					t.Error(err)
				}
				if ok {
					firsts.Add(1)
				}
			}()
		}
		wg.Wait()
		if firsts.Load() != 1 {
			t.Fatalf("%d first claims, want 1", firsts.Load())
		}
		for _, c := range []struct{ subject, object string }{{"u2", "item:9"}, {"u1", "item:10"}, {"u1:item", "9"}, {"u1", ""}} {
			if ok, err := g.Claim(ctx, c.subject, c.object); !ok || err != nil {
				t.Fatalf("claim %v: first=%v err=%v; keys of distinct pairs collided", c, ok, err)
			}
		}
		today := g.Today()
		if n, err := g.Count(ctx, "item:9", today); n != 2 || err != nil {
			t.Fatalf("Count = %d, %v; want 2", n, err)
		}
		// Release gives the claim back and uncounts it; only once.
		tk, _ := g.Take(ctx, "u3", "item:9", nil)
		if err := tk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := g.Count(ctx, "item:9", today); n != 2 {
			t.Fatalf("Count after release = %d, want 2", n)
		}
		if ok, _ := g.Claim(ctx, "u3", "item:9"); !ok {
			t.Fatal("a released claim cannot be taken again")
		}
		// A stale ticket never releases someone else's claim.
		if err := tk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, _ := g.Claim(ctx, "u3", "item:9"); ok {
			t.Fatal("a stale ticket released the current claim")
		}
	})
}

func TestGateCountApproximate(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		ctx := context.Background()
		g, err := httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "read", Mode: httpidem.ModeCount, Approximate: true})
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		for i := 0; i < n; i++ {
			for j := 0; j < 2; j++ {
				if _, err := g.Claim(ctx, fmt.Sprintf("user-%d", i), "article-1"); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := g.Count(ctx, "article-1", g.Today())
		if err != nil || got < n*97/100 || got > n*103/100 {
			t.Fatalf("approximate count %d, %v; want %d ± 3%%", got, err, n)
		}
	})
}

func TestGateArguments(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	g, _ := httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "vote"})
	ctx := context.Background()
	for _, c := range []struct{ subject, object string }{{"", "x"}, {strings.Repeat("s", 257), "x"}, {"u", strings.Repeat("o", 257)}} {
		if _, err := g.Claim(ctx, c.subject, c.object); err == nil {
			t.Errorf("Claim(%q, %q) accepted", c.subject[:min(len(c.subject), 8)], c.object[:min(len(c.object), 8)])
		}
	}
	for _, cfg := range []httpidem.DailyConfig{
		{Scope: "vote"},
		{Store: store},
		{Store: store, Scope: "bad\nscope"},
		{Store: store, Scope: "a\xffb"},
		{Store: store, Scope: strings.Repeat("s", 65)},
		{Store: store, Scope: "vote", Grace: -time.Second},
		{Store: store, Scope: "vote", Approximate: true},
		{Store: store, Scope: "vote", Mode: httpidem.ModeCount, Counted: true},
		{Store: store, Scope: "vote", Mode: 7},
	} {
		if _, err := httpidem.NewGate(cfg); err == nil {
			t.Errorf("NewGate(%+v) accepted", cfg)
		}
	}
}
