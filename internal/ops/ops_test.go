package ops_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/ops"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/robfig/cron/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// must returns v, or panics with err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// backends runs f on memory, miniredis and the shared Redis (a prefix of
// its own, deleted after).
func backends(t *testing.T, f func(t *testing.T, c *core.Client)) {
	t.Run("memory", func(t *testing.T) {
		c := must(core.NewMemory())
		defer c.Close()
		f(t, c)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := redistest.Miniredis(t, true)
		c := must(core.NewRedis(rdb))
		defer c.Close()
		f(t, c)
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		c := must(core.NewRedis(rdb, core.WithKeyPrefix(redistest.Prefix(t, rdb))))
		defer c.Close()
		f(t, c)
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLocksInspectEvict: the rows of a lock, a semaphore and an RWMutex;
// everything about a key; a force release that tells the holder and
// raises the fence.
func TestLocksInspectEvict(t *testing.T) {
	backends(t, func(t *testing.T, c *core.Client) {
		ctx := ctxFor(t)
		ttl := core.WithTTL(600 * time.Millisecond)
		lk := must(c.TryLock(ctx, "orders/7", ttl, core.WithMetadata("node-a pid 42")))
		defer lk.Release(ctx)
		sem := c.Semaphore("exports", 3)
		p1 := must(sem.TryAcquire(ctx, ttl, core.WithMetadata("p1")))
		defer p1.Release(ctx)
		p2 := must(sem.TryAcquire(ctx, ttl))
		defer p2.Release(ctx)
		r := must(c.RWMutex("config").TryRLock(ctx, ttl))
		defer r.Release(ctx)

		var rows []string
		for p, err := range ops.Locks(ctx, c, "") {
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, p.Key+" "+p.Type+" "+strings.Repeat("h", len(p.Holds)))
			if p.Type == ops.TypeLock {
				h := p.Holds[0]
				if h.Token != lk.Token() || h.Holder != lk.Token()[:8]+"…" || h.Fence != lk.Fence() ||
					h.Metadata != "node-a pid 42" || h.TTLMs <= 0 || h.TTLMs > 600 {
					t.Errorf("lock row: %+v", h)
				}
			}
		}
		slices.Sort(rows)
		if want := []string{"config rwmutex h", "exports semaphore hh", "orders/7 lock h"}; !slices.Equal(rows, want) {
			t.Errorf("rows %q, want %q", rows, want)
		}
		for _, err := range ops.Locks(ctx, c, "[") {
			if !errors.Is(err, core.ErrInvalidOption) {
				t.Errorf("a bad pattern: %v", err)
			}
		}

		k := must(ops.Inspect(ctx, c, "exports"))
		if !k.Held || k.Lock != nil || len(k.Permits) != 2 || len(k.RW) != 0 {
			t.Errorf("Inspect(exports): %+v", k)
		}
		if _, err := ops.Inspect(ctx, c, "}bad"); !errors.Is(err, core.ErrInvalidKey) {
			t.Errorf("Inspect of an invalid key: %v", err)
		}

		ev, err := ops.Evict(ctx, c, "orders/7")
		if err != nil || len(ev.Evicted) != 1 || ev.Evicted[0].Token != lk.Token() || ev.Fence <= lk.Fence() {
			t.Fatalf("Evict: %+v, %v", ev, err)
		}
		select {
		case <-lk.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the evicted holder was not told")
		}
		next := must(c.TryLock(ctx, "orders/7"))
		defer next.Release(ctx)
		if next.Fence() <= ev.Fence {
			t.Errorf("the next holder's fence %d is not above the raised %d", next.Fence(), ev.Fence)
		}
		if _, err := ops.Evict(ctx, c, "free"); !errors.Is(err, core.ErrNotHeld) || !ops.NotFound(err) {
			t.Errorf("Evict of a free key: %v", err)
		}
	})
}

// TestCronRuns: every job's last run, one job's, and a job that never ran.
func TestCronRuns(t *testing.T) {
	backends(t, func(t *testing.T, c *core.Client) {
		ctx := ctxFor(t)
		l := must(cronlock.New(c, cronlock.WithNodeID("node-a"), cronlock.WithLogger(cron.DiscardLogger)))
		for _, name := range []string{"backup", "report"} {
			job := must(l.Job(name, cron.Every(time.Hour), func(context.Context) error {
				if name == "report" {
					return errors.New("no data")
				}
				return nil
			}))
			job.Run()
		}
		var got []string
		for r, err := range ops.CronRuns(ctx, c, "") {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Job+" "+r.Node+" "+r.Error)
		}
		slices.Sort(got)
		if want := []string{"backup node-a ", "report node-a no data"}; !slices.Equal(got, want) {
			t.Errorf("CronRuns: %q, want %q", got, want)
		}
		for r, err := range ops.CronRuns(ctx, c, "report") {
			if err != nil || r.Job != "report" || r.Planned.IsZero() {
				t.Errorf("CronRuns(report): %+v %v", r, err)
			}
		}
		for _, err := range ops.CronRuns(ctx, c, "never") {
			if !ops.NotFound(err) {
				t.Errorf("a job that never ran: %v", err)
			}
		}
		for _, err := range ops.CronRuns(ctx, c, "bad\nname") {
			if !errors.Is(err, cronlock.ErrInvalidName) {
				t.Errorf("an invalid job name: %v", err)
			}
		}
	})
}

// TestDailyAndIdem: a day's count, a stored response shown and deleted.
func TestDailyAndIdem(t *testing.T) {
	for _, b := range []struct {
		name  string
		store func(t *testing.T) interface {
			httpidem.IdempotencyStore
			httpidem.ClaimCounter
			ops.Responses
		}
	}{
		{"memory", func(t *testing.T) interface {
			httpidem.IdempotencyStore
			httpidem.ClaimCounter
			ops.Responses
		} {
			s := must(httpidem.NewMemoryStore())
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) interface {
			httpidem.IdempotencyStore
			httpidem.ClaimCounter
			ops.Responses
		} {
			rdb := redistest.Client(t)
			s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(redistest.Prefix(t, rdb))))
			t.Cleanup(func() { s.Close() })
			return s
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxFor(t)
			store := b.store(t)
			g := must(httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "vote", Counted: true}))
			for _, u := range []string{"u1", "u2", "u1"} {
				must(g.Claim(ctx, u, "item-9"))
			}
			n := must(ops.Daily(ctx, store, "vote", "item-9", g.Today()))
			if n.Count != 2 || n.Day != g.Today().String() {
				t.Errorf("Daily: %+v", n)
			}
			if _, err := ops.Daily(ctx, store, "bad\nscope", "x", g.Today()); !errors.Is(err, httpidem.ErrInvalidArgument) {
				t.Errorf("a bad scope: %v", err)
			}

			mw := must(httpidem.IdempotencyConfig{Store: store,
				Principal: func(*http.Request) (string, error) { return "tenant-1", nil }}.ToMiddleware())
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", "/orders/1")
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte("created"))
			}))
			req := httptest.NewRequest("POST", "/orders", nil)
			req.Header.Set("Idempotency-Key", "k-1")
			h.ServeHTTP(httptest.NewRecorder(), req)

			rec := must(ops.Idem(ctx, store, "tenant-1", "k-1", false))
			if !rec.Stored || rec.Status != 201 || rec.Size != 7 || !slices.Contains(rec.Header, "Location: /orders/1") ||
				rec.TTLMs <= 0 || rec.ExpiresAt.IsZero() || rec.Deleted {
				t.Errorf("Idem: %+v", rec)
			}
			rec = must(ops.Idem(ctx, store, "tenant-1", "k-1", true))
			if !rec.Deleted {
				t.Errorf("Idem --delete: %+v", rec)
			}
			if _, err := ops.Idem(ctx, store, "tenant-1", "k-1", false); !ops.NotFound(err) {
				t.Errorf("after the delete: %v", err)
			}
			if _, err := ops.Idem(ctx, store, "", "k-1", false); !errors.Is(err, httpidem.ErrInvalidArgument) {
				t.Errorf("no principal: %v", err)
			}
		})
	}
}

// TestParseEvents: what the wire says, event by event.
func TestParseEvents(t *testing.T) {
	at := time.Unix(0, 0)
	for _, tc := range []struct {
		channel, payload string
		keyspace         bool
		want             string // "key type event token", "" for ignored
	}{
		{"lk:{a}", "r:", false, "a lock release "},
		{"lk:{a}", "r:x8f", false, "a lock release "},
		{"lk:{a/b}:sem", "r:", false, "a/b semaphore release "},
		{"lk:{a}:rw", "g:TOK", false, "a rwmutex grant TOK"},
		{"lk:{lead}", "l:TOK", false, "lead lock leader TOK"},
		{"lk:grants:c0ffee", "g:TOK|lk:{a}", false, "a lock grant TOK"},
		{"lk:grants:c0ffee", "g:TOK", false, ""},
		{"lk:grants:c0ffee", "r:|lk:{a}", false, ""},
		{"lk:{a}", "?", false, ""},
		{"lk:{a}:fence", "r:", false, ""},
		{"other:{a}", "r:", false, ""},
		{"__keyspace@0__:lk:{a}", "set", true, "a lock acquire "},
		{"__keyspace@3__:lk:{a}:rw", "set", true, "a rwmutex acquire "},
		{"__keyspace@0__:lk:{a}", "expired", true, "a lock expire "},
		{"__keyspace@0__:lk:{a}:sem", "expired", true, "a semaphore expire "},
		{"__keyspace@0__:lk:{a}:sem", "zadd", true, ""},
		{"__keyspace@0__:lk:{a}", "pexpire", true, ""},
		{"__keyspace@0__:lk:{a}", "del", true, ""},
		{"__keyspace@0__:lk:{a}:fence", "set", true, ""},
	} {
		parse := ops.ParseNotification
		if tc.keyspace {
			parse = ops.ParseKeyspace
		}
		got := ""
		if ev, ok := parse("lk", tc.channel, tc.payload, at); ok {
			got = ev.Key + " " + ev.Type + " " + ev.Event + " " + ev.Token
		}
		if got != tc.want {
			t.Errorf("%s %q: %q, want %q", tc.channel, tc.payload, got, tc.want)
		}
	}
	for setting, want := range map[string]bool{"": false, "KEA": true, "Kx$": true, "Ex$": false, "Kx": false, "AK": true} {
		if ops.KeyspaceEnabled(setting) != want {
			t.Errorf("KeyspaceEnabled(%q) != %v", setting, want)
		}
	}
}
