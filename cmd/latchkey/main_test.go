package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// deadRedis is a URL where nothing listens: a command that gets as far as
// Redis fails with exit 1, so an exit 2 proves it stopped before any I/O.
const deadRedis = "redis://:hunter2@127.0.0.1:1/0"

// result is one in-process run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs the command with args and stdin.
func runCmd(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := runContext(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// mustNew returns v, or panics with err.
func mustNew[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestUsageAndExitCodes: bad input is exit 2 with a message naming it,
// and is found before any I/O (the Redis here is dead: reaching it would
// be exit 1); a password never shows.
func TestUsageAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr (or stdout for help)
	}{
		{"no command", nil, 2, "usage:"},
		{"help", []string{"help"}, 0, "latchkey locks"},
		{"unknown command", []string{"lock"}, 2, `unknown command "lock"`},
		{"subcommand help", []string{"inspect", "-h"}, 0, "usage: latchkey inspect KEY"},
		{"unknown flag", []string{"locks", "--bogus"}, 2, "-bogus"},
		{"extra argument", []string{"locks", "x"}, 2, "want no arguments"},
		{"inspect without key", []string{"inspect"}, 2, "want 1 argument"},
		{"invalid key", []string{"inspect", "--", "}bad"}, 2, "invalid key"},
		{"empty key", []string{"inspect", ""}, 2, "empty key"},
		{"release without force", []string{"release", "k"}, 2, "--force"},
		{"release of an invalid key", []string{"release", "--force", "--yes", "--", "}bad"}, 2, "invalid key"},
		{"bad match", []string{"locks", "--match", "["}, 2, `--match "["`},
		{"bad day", []string{"daily", "vote", "item", "--day", "2026-13-01"}, 2, "want YYYY-MM-DD"},
		{"bad zone", []string{"daily", "vote", "item", "--tz", "Mars/Olympus"}, 2, "--tz"},
		{"bad scope", []string{"daily", "bad\nscope", "item"}, 2, "scope"},
		{"idem without principal", []string{"idem", "k"}, 2, "--principal is required"},
		{"idem --yes without --delete", []string{"idem", "k", "--principal", "p", "--yes"}, 2, "--yes without --delete"},
		{"bad cron job name", []string{"cron", "bad\njob"}, 2, "invalid job name"},
		{"bad timeout", []string{"locks", "--timeout", "0s"}, 2, "--timeout"},
		{"bad keyspace", []string{"watch", "--keyspace", "maybe"}, 2, "--keyspace"},
		{"bad prefix", []string{"locks", "--prefix", "a{b"}, 2, "--prefix"},
		{"unparsable URL", []string{"locks", "--redis", "redis://u:hunter2@[::1"}, 2, "cannot parse the URL"},
		{"unknown scheme", []string{"locks", "--redis", "http://u:hunter2@x"}, 2, `unknown scheme "http"`},
		{"unknown option", []string{"locks", "--redis", "redis://u:hunter2@x/0?bogus=1"}, 2, "bogus"},
		{"sentinel without master", []string{"locks", "--redis", "redis+sentinel://u:hunter2@x:26379"}, 2, "master_name"},
		{"redis down", []string{"locks"}, 1, "connection refused"},
		{"redis down, inspect", []string{"inspect", "k"}, 1, "backend unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if len(args) > 0 && !slicesContains(args, "--redis") {
				args = append(append([]string{args[0]}, "--redis", deadRedis), args[1:]...)
			}
			r := runCmd(t, "", args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr+r.stdout, tc.want) {
				t.Errorf("output does not say %q:\nstdout: %s\nstderr: %s", tc.want, r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, "hunter2") {
				t.Errorf("the password shows:\n%s", r.stderr)
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// servers runs f on miniredis and the shared Redis, with the URL and a
// prefix of its own (deleted after).
func servers(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient, url, prefix string)) {
	t.Run("miniredis", func(t *testing.T) {
		mr, rdb := redistest.Miniredis(t, true)
		f(t, rdb, "redis://"+mr.Addr()+"/0", "lk")
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		f(t, rdb, "redis://"+rdb.Options().Addr+"/0", redistest.Prefix(t, rdb))
	})
}

// locked holds a lock, a semaphore's two permits and a read hold under
// prefix; released at cleanup.
func locked(t *testing.T, rdb redis.UniversalClient, prefix string) (*core.Client, *core.Lock) {
	t.Helper()
	c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	lk := mustNew(c.TryLock(ctx, "orders/7", core.WithMetadata("node-a pid 42"), core.WithTTL(3*time.Second)))
	sem := c.Semaphore("exports", 3)
	mustNew(sem.TryAcquire(ctx, core.WithMetadata("worker 1"), core.WithTTL(20*time.Second)))
	mustNew(sem.TryAcquire(ctx, core.WithMetadata("worker 2")))
	mustNew(c.RWMutex("config").TryRLock(ctx))
	return c, lk
}

// TestLocksAndInspect: the table and the JSON of locks, a match, one key
// inspected, and a free key is exit 3.
func TestLocksAndInspect(t *testing.T) {
	servers(t, func(t *testing.T, rdb redis.UniversalClient, url, prefix string) {
		_, lk := locked(t, rdb, prefix)
		r := runCmd(t, "", "locks", "--redis", url, "--prefix", prefix)
		if r.code != 0 {
			t.Fatalf("locks: exit %d: %s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 5 || !regexp.MustCompile(`^KEY +KIND +HOLDER +FENCE +TTL +WAITERS +METADATA$`).MatchString(lines[0]) {
			t.Fatalf("locks table:\n%s", r.stdout)
		}
		row := regexp.MustCompile(`(?m)^orders/7 +lock +` + lk.Token()[:8] + `… +` +
			regexp.QuoteMeta(itoa(lk.Fence())) + ` +[0-9.]+s +0 +node-a pid 42$`)
		if !row.MatchString(r.stdout) {
			t.Errorf("no row for orders/7 in:\n%s", r.stdout)
		}
		if n := strings.Count(r.stdout, "\nexports   "); n != 2 {
			t.Errorf("%d permit rows, want 2:\n%s", n, r.stdout)
		}

		r = runCmd(t, "", "locks", "--redis", url, "--prefix", prefix, "--json", "--match", "orders/*")
		var got []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
			t.Fatalf("locks --json: exit %d, %v:\n%s", r.code, err, r.stdout)
		}
		want := `[{"holds":[{"fence":"<fence>","holder":"<holder>","kind":"lock","metadata":"node-a pid 42","token":"<token>","ttl_ms":"<ttl>"}],"key":"orders/7","oldest_wait_ms":0,"type":"lock","waiters":0}]`
		if s := normalize(t, got); s != want {
			t.Errorf("locks --json:\n got  %s\n want %s", s, want)
		}
		if h := got[0]["holds"].([]any)[0].(map[string]any); h["token"] != lk.Token() || int64(h["fence"].(float64)) != lk.Fence() {
			t.Errorf("the holder's token and fence: %v", h)
		}

		r = runCmd(t, "", "inspect", "exports", "--redis", url, "--prefix", prefix, "--json")
		var k map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &k); err != nil || r.code != 0 {
			t.Fatalf("inspect --json: exit %d, %v:\n%s", r.code, err, r.stdout)
		}
		want = `{"fair_queue":0,"fair_queue_oldest_ms":0,"fence":0,"held":true,"key":"exports","lock":null,"permit_queue":0,"permit_queue_oldest_ms":0,` +
			`"permits":[{"fence":"<fence>","holder":"<holder>","kind":"permit","metadata":"worker 1","token":"<token>","ttl_ms":"<ttl>"},` +
			`{"fence":"<fence>","holder":"<holder>","kind":"permit","metadata":"worker 2","token":"<token>","ttl_ms":"<ttl>"}],"rw":[],"writers_oldest_ms":0,"writers_waiting":0}`
		if s := normalize(t, k); s != want {
			t.Errorf("inspect --json:\n got  %s\n want %s", s, want)
		}
		r = runCmd(t, "", "inspect", "orders/7", "--redis", url, "--prefix", prefix)
		if r.code != 0 || !strings.Contains(r.stdout, "held by "+lk.Token()) || !strings.Contains(r.stdout, "0 waiter(s) in the fair queue\n") {
			t.Errorf("inspect: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = runCmd(t, "", "inspect", "free", "--redis", url, "--prefix", prefix)
		if r.code != 3 || !strings.Contains(r.stderr, "nothing holds it") {
			t.Errorf("inspect of a free key: exit %d: %s", r.code, r.stderr)
		}
		r = runCmd(t, "", "locks", "--redis", url, "--prefix", prefix+"-empty", "--json")
		if r.code != 0 || r.stdout != "[]\n" {
			t.Errorf("locks --json of nothing: exit %d %q", r.code, r.stdout)
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// normalize re-encodes v with its varying values (tokens, the fences and
// times left of holds) replaced by placeholders, keys sorted.
func normalize(t *testing.T, v any) string {
	t.Helper()
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch {
				case k == "token" || k == "holder" || k == "ttl_ms" || k == "fence" && x["kind"] != nil:
					x[k] = "<" + strings.TrimSuffix(k, "_ms") + ">"
				default:
					walk(e)
				}
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	v = nil
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	walk(v)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

// TestRelease: a declined confirmation changes nothing; a confirmed force
// release evicts, the holder is told, and the next fence is higher.
func TestRelease(t *testing.T) {
	servers(t, func(t *testing.T, rdb redis.UniversalClient, url, prefix string) {
		c, lk := locked(t, rdb, prefix)
		args := []string{"release", "--force", "orders/7", "--redis", url, "--prefix", prefix}
		for _, answer := range []string{"n\n", ""} {
			r := runCmd(t, answer, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "not confirmed") || !strings.Contains(r.stderr, lk.Token()) {
				t.Errorf("answer %q: exit %d: %s", answer, r.code, r.stderr)
			}
		}
		if info, _ := c.Inspect(context.Background(), "orders/7"); info.Token != lk.Token() {
			t.Fatal("a declined release released")
		}
		r := runCmd(t, "y\n", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "evicted 1 hold(s)") || !strings.Contains(r.stdout, lk.Token()) ||
			!strings.Contains(r.stdout, "fence is now") {
			t.Fatalf("release: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
		}
		select {
		case <-lk.Lost():
		case <-time.After(5 * time.Second): // renewed every second
			t.Fatal("the evicted holder was not told")
		}
		next := mustNew(c.TryLock(context.Background(), "orders/7"))
		defer next.Release(context.Background())
		if next.Fence() <= lk.Fence()+1 {
			t.Errorf("next fence %d after evicting fence %d: want it raised by the eviction", next.Fence(), lk.Fence())
		}
		r = runCmd(t, "", "release", "--force", "--yes", "exports", "--json", "--redis", url, "--prefix", prefix)
		var ev struct {
			Key     string
			Evicted []struct{ Kind, Token string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &ev); err != nil || r.code != 0 || len(ev.Evicted) != 2 || ev.Evicted[0].Kind != "permit" {
			t.Errorf("release --json: exit %d, %v: %s", r.code, err, r.stdout)
		}
		r = runCmd(t, "", "release", "--force", "--yes", "exports", "--redis", url, "--prefix", prefix)
		if r.code != 3 || !strings.Contains(r.stderr, "nothing holds it") {
			t.Errorf("release of a free key: exit %d: %s", r.code, r.stderr)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watching runs watch until the test ends, and returns its output.
func watching(t *testing.T, args ...string) (stdout, stderr *syncBuffer) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- runContext(ctx, append([]string{"watch"}, args...), strings.NewReader(""), stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("watch: exit %d: %s", code, stderr.String())
		}
	})
	waitFor(t, stderr, "watching")
	return stdout, stderr
}

func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", want, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatch: releases, grants to queued waiters and leaders, as they
// happen.
func TestWatch(t *testing.T) {
	servers(t, func(t *testing.T, rdb redis.UniversalClient, url, prefix string) {
		out, _ := watching(t, "--redis", url, "--prefix", prefix, "--json")
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		ctx := context.Background()
		lk := mustNew(c.TryLock(ctx, "w/1"))
		got := make(chan *core.Lock)
		go func() {
			l, _ := c.Lock(ctx, "w/1", core.WithWaitTimeout(10*time.Second))
			got <- l
		}()
		// The waiter queues (after 50 ms); its first attempts marked the
		// key as waited for (for 10 s), so that its own release below is
		// published too, not just the grant it gets.
		time.Sleep(200 * time.Millisecond)
		lk.Release(ctx)
		waiter := <-got
		if waiter == nil {
			t.Fatal("the waiter did not get the lock")
		}
		waiter.Release(ctx)
		lead := mustNew(c.Campaign(ctx, "leader", "10.0.0.7"))
		defer lead.Release(ctx)
		waitFor(t, out, `"event":"leader"`)
		var evs []string
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var ev struct{ Key, Type, Event, Token, Source string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("%v: %q", err, line)
			}
			evs = append(evs, ev.Event+" "+ev.Key+" "+ev.Token)
		}
		want := []string{"grant w/1 " + waiter.Token(), "release w/1 ", "leader leader " + lead.Token()}
		if strings.Join(evs, "\n") != strings.Join(want, "\n") {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(evs, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestWatchKeyspace: with keyspace notifications on, acquisitions and
// expiries show too (a private server: the shared one's config is left
// alone).
func TestWatchKeyspace(t *testing.T) {
	srv := redistest.StartServer(t, "--notify-keyspace-events", "K$x")
	rdb := srv.Client(t)
	out, errb := watching(t, "--redis", "redis://"+srv.Addr())
	if !strings.Contains(errb.String(), "acquisitions and expiries (keyspace notifications)") {
		t.Errorf("banner: %s", errb.String())
	}
	c := mustNew(core.NewRedis(rdb))
	defer c.Close()
	mustNew(c.TryLock(context.Background(), "k/1", core.WithTTL(100*time.Millisecond), core.WithAutoRenew(false)))
	waitFor(t, out, "expire ")
	if !regexp.MustCompile(`(?m)acquire +lock +k/1 .*keyspace\n.*expire +lock +k/1 .*keyspace$`).MatchString(out.String()) {
		t.Errorf("watch:\n%s", out.String())
	}
}

// TestRun: run, what main calls, is runContext under a signal context.
func TestRun(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"help"}, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), "latchkey release") {
		t.Errorf("run help: exit %d: %s%s", code, out.String(), errb.String())
	}
}

// TestWaitAges: a queued waiter shows in both the table and inspect, with
// how long it has waited.
func TestWaitAges(t *testing.T) {
	servers(t, func(t *testing.T, rdb redis.UniversalClient, url, prefix string) {
		c := mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix)))
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		held, err := c.TryLock(ctx, "queue/1")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); c.Lock(wctx, "queue/1", core.WithFair()) }()
		defer func() { stop(); <-done }()
		for {
			info, err := c.Inspect(ctx, "queue/1")
			if err != nil {
				t.Fatal(err)
			}
			if info.Waiters == 1 && info.OldestWait >= 50*time.Millisecond {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		r := runCmd(t, "", "locks", "--redis", url, "--prefix", prefix)
		if r.code != 0 || !regexp.MustCompile(`(?m)^queue/1 +lock .* 1 \([0-9.]+m?s\)( |$)`).MatchString(r.stdout) {
			t.Errorf("locks: exit %d, want a waiter with its age:\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = runCmd(t, "", "inspect", "queue/1", "--redis", url, "--prefix", prefix)
		if r.code != 0 || !regexp.MustCompile(`1 waiter\(s\) in the fair queue, the first for [0-9.]+m?s`).MatchString(r.stdout) {
			t.Errorf("inspect: exit %d, want the waiter's age:\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}
