package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// TestCron: every job's last run, one job's, a job that never ran.
func TestCron(t *testing.T) {
	servers(t, func(t *testing.T, rdb redis.UniversalClient, url, prefix string) {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		l := mustNew(cronlock.New(c, cronlock.WithNodeID("node-b"), cronlock.WithLogger(cron.DiscardLogger)))
		for _, name := range []string{"backup", "report/daily"} {
			job := mustNew(l.Job(name, cron.Every(time.Hour), func(context.Context) error {
				if name == "backup" {
					return errors.New("bucket not found")
				}
				return nil
			}))
			job.Run()
		}
		r := runCmd(t, "", "cron", "--redis", url, "--prefix", prefix)
		if r.code != 0 || !regexp.MustCompile(`(?m)^backup +node-b .* error: bucket not found$`).MatchString(r.stdout) ||
			!regexp.MustCompile(`(?m)^report/daily +node-b .* ok$`).MatchString(r.stdout) {
			t.Errorf("cron: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = runCmd(t, "", "cron", "backup", "--json", "--redis", url, "--prefix", prefix)
		var run map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || r.code != 0 ||
			run["job"] != "backup" || run["node"] != "node-b" || run["error"] != "bucket not found" || run["planned"] == nil {
			t.Errorf("cron backup --json: exit %d %v: %s", r.code, err, r.stdout)
		}
		r = runCmd(t, "", "cron", "--json", "--redis", url, "--prefix", prefix)
		var runs []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil || len(runs) != 2 {
			t.Errorf("cron --json: %v: %s", err, r.stdout)
		}
		r = runCmd(t, "", "cron", "never-ran", "--redis", url, "--prefix", prefix)
		if r.code != 3 || !strings.Contains(r.stderr, `job "never-ran" has no recorded run`) {
			t.Errorf("cron of a job that never ran: exit %d: %s", r.code, r.stderr)
		}
	})
}

// TestDailyAndIdem: a day's count; a stored response shown, then deleted
// after a confirmation.
func TestDailyAndIdem(t *testing.T) {
	servers(t, func(t *testing.T, rdb redis.UniversalClient, url, prefix string) {
		prefix += ":http"
		store := mustNew(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix)))
		defer store.Close()
		ctx := context.Background()
		g := mustNew(httpidem.NewGate(httpidem.DailyConfig{Store: store, Scope: "vote", Counted: true}))
		for _, u := range []string{"ann", "bob", "ann", "cy"} {
			mustNew(g.Claim(ctx, u, "item-9"))
		}
		day := g.Today().String()
		r := runCmd(t, "", "daily", "vote", "item-9", "--day", day, "--redis", url, "--prefix", prefix)
		if r.code != 0 || r.stdout != "vote item-9 on "+day+": 3\n" {
			t.Errorf("daily: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		r = runCmd(t, "", "daily", "vote", "item-9", "--json", "--redis", url, "--prefix", prefix)
		if r.code != 0 || normalize(t, json.RawMessage(r.stdout)) != `{"count":3,"day":"`+day+`","object":"item-9","scope":"vote"}` {
			t.Errorf("daily --json: exit %d %s %s", r.code, r.stdout, r.stderr)
		}

		mw := mustNew(httpidem.IdempotencyConfig{Store: store,
			Principal: func(*http.Request) (string, error) { return "tenant-1", nil }}.ToMiddleware())
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/orders/1")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":1}`))
		}))
		req := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "order-1")
		h.ServeHTTP(httptest.NewRecorder(), req)

		args := []string{"idem", "order-1", "--principal", "tenant-1", "--redis", url, "--prefix", prefix}
		r = runCmd(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "status     201") || !strings.Contains(r.stdout, "size       8 bytes") ||
			!strings.Contains(r.stdout, "Location: /orders/1") || !strings.Contains(r.stdout, "left)") {
			t.Errorf("idem: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = runCmd(t, "", append(args, "--json")...)
		want := `{"expires_at":"<t>","fingerprint":"<fp>","header":["Location: /orders/1"],` +
			`"key":"order-1","principal":"tenant-1","size":8,"status":201,"stored":true,"ttl_ms":"<ttl>"}`
		got := regexp.MustCompile(`"(expires_at|fingerprint)":"[^"]*"`).ReplaceAllStringFunc(normalize(t, json.RawMessage(r.stdout)),
			func(s string) string {
				if strings.HasPrefix(s, `"expires_at"`) {
					return `"expires_at":"<t>"`
				}
				return `"fingerprint":"<fp>"`
			})
		if r.code != 0 || got != want {
			t.Errorf("idem --json:\n got  %s\n want %s", got, want)
		}
		r = runCmd(t, "n\n", append(args, "--delete")...)
		if r.code != 1 || !strings.Contains(r.stderr, "not confirmed") {
			t.Errorf("idem --delete, declined: exit %d %s", r.code, r.stderr)
		}
		r = runCmd(t, "yes\n", append(args, "--delete")...)
		if r.code != 0 || !strings.Contains(r.stdout, "deleted: the next request with this key runs again") {
			t.Errorf("idem --delete: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = runCmd(t, "", args...)
		if r.code != 3 || !strings.Contains(r.stderr, "no stored response") {
			t.Errorf("idem after the delete: exit %d %s", r.code, r.stderr)
		}
	})
}

// TestHostileKeys: a key made of terminal escapes and markup is printed
// escaped in a table, and as JSON in JSON.
func TestHostileKeys(t *testing.T) {
	mr, rdb := redistest.Miniredis(t, true)
	c := mustNew(core.NewRedis(rdb))
	defer c.Close()
	key := "\x1b]0;pwned\a<script>alert(1)</script>"
	lk := mustNew(c.TryLock(context.Background(), key, core.WithMetadata("\x1b[2J\"><img src=x onerror=alert(1)>")))
	defer lk.Release(context.Background())
	r := runCmd(t, "", "locks", "--redis", "redis://"+mr.Addr())
	if strings.ContainsAny(r.stdout, "\x1b\a") || !strings.Contains(r.stdout, `\x1b]0;pwned\a<script>`) {
		t.Errorf("table: %q", r.stdout)
	}
	r = runCmd(t, "", "locks", "--json", "--redis", "redis://"+mr.Addr())
	var got []struct {
		Key   string
		Holds []struct{ Metadata string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 || got[0].Key != key {
		t.Errorf("json: %v %q", err, r.stdout)
	}
}

// TestRedisURL: REDIS_URL is used when --redis is not given, and
// --redis wins over it.
func TestRedisURL(t *testing.T) {
	mr, rdb := redistest.Miniredis(t, true)
	c := mustNew(core.NewRedis(rdb))
	defer c.Close()
	lk := mustNew(c.TryLock(context.Background(), "env-key"))
	defer lk.Release(context.Background())
	t.Setenv("REDIS_URL", "redis://"+mr.Addr()+"/0")
	if r := runCmd(t, "", "locks"); r.code != 0 || !strings.Contains(r.stdout, "env-key") {
		t.Errorf("with REDIS_URL: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd(t, "", "locks", "--redis", deadRedis); r.code != 1 {
		t.Errorf("--redis over REDIS_URL: exit %d", r.code)
	}
}

// TestClusterAndSentinel: a Cluster URL lists the keys of every master;
// a Sentinel URL finds the master.
func TestClusterAndSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Cluster and a Sentinel (a few seconds)")
	}
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		cc := cl.Client(t)
		c := mustNew(core.NewRedis(cc))
		defer c.Close()
		ctx := context.Background()
		for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			lk := mustNew(c.TryLock(ctx, "job/"+k))
			defer lk.Release(ctx)
		}
		addrs := cl.Addrs()
		r := runCmd(t, "", "locks", "--json", "--redis", "redis+cluster://"+addrs[0]+"?addr="+addrs[1])
		var got []struct{ Key string }
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 || len(got) != 8 {
			t.Errorf("locks on a Cluster: exit %d %v: %s %s", r.code, err, r.stdout, r.stderr)
		}
		if r := runCmd(t, "y\n", "release", "--force", "job/c", "--redis", "redis+cluster://"+addrs[2]); r.code != 0 {
			t.Errorf("release on a Cluster: exit %d %s", r.code, r.stderr)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		master := redistest.StartServer(t)
		sentinel := redistest.StartSentinel(t, master, "mymaster")
		c := mustNew(core.NewRedis(master.Client(t)))
		defer c.Close()
		lk := mustNew(c.TryLock(context.Background(), "via-sentinel"))
		defer lk.Release(context.Background())
		for _, url := range []string{"redis://" + sentinel.Addr() + "?master_name=mymaster", "redis+sentinel://" + sentinel.Addr() + "/0?master_name=mymaster"} {
			if r := runCmd(t, "", "inspect", "via-sentinel", "--redis", url); r.code != 0 || !strings.Contains(r.stdout, lk.Token()) {
				t.Errorf("%s: exit %d %s %s", url, r.code, r.stdout, r.stderr)
			}
		}
	})
}
