package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/latchkey/latchkey/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// serverPid returns the pid of the redis-server behind c.
func serverPid(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(ctx(t), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("process_id %q: %v", v, err)
			}
			return pid
		}
	}
	t.Fatalf("no process_id in INFO server")
	return 0
}

func TestServerKillRestart(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	if want := fmt.Sprintf("127.0.0.1:%d", s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
	c := s.Client(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	pid := serverPid(t, c)

	s.Kill(t)
	s.Kill(t) // idempotent
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid %d still exists after Kill (zombie?): %v", pid, err)
	}
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("port not free after Kill: %v", err)
	}
	l.Close()

	s.Restart(t)
	if got, err := c.Get(ctx(t), "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart = %q, %v; want redis.Nil (no persistence)", got, err)
	}
	if err := c.Set(ctx(t), "k", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
	pid2 := serverPid(t, c)
	if pid2 == pid {
		t.Fatalf("same pid %d after Restart", pid)
	}

	// Restart retries while another process holds the port.
	s.Kill(t)
	l, err = net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("port not free after Kill: %v", err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(300 * time.Millisecond)
		l.Close()
	}()
	s.Restart(t)
	<-released

	s.Restart(t) // restarting a running server kills it first
	s.Restart(t)
	if got, err := c.Get(ctx(t), "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after second Restart = %q, %v; want redis.Nil", got, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid2)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid %d still exists after Restart: %v", pid2, err)
	}
}

func TestServerPauseResume(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t, "--maxmemory", "16mb")
	c := s.Client(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if got, err := c.ConfigGet(ctx(t), "maxmemory").Result(); err != nil || got["maxmemory"] != strconv.Itoa(16<<20) {
		t.Fatalf("extraArgs not applied: CONFIG GET maxmemory = %v, %v", got, err)
	}

	s.Pause(t)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := c.Ping(short).Err()
	cancel()
	if err == nil {
		t.Fatalf("PING succeeded on a paused server")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("PING on a paused server took %v despite a 200ms deadline", d)
	}

	s.Resume(t)
	s.Resume(t) // no-op
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	// Left paused on purpose: the cleanup must kill a stopped process.
	s.Pause(t)
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := redistest.StartCluster(t, 3)
	t.Logf("StartCluster(t, 3) took %v", time.Since(start))
	if n := len(cl.Addrs()); n != 3 {
		t.Fatalf("%d addrs, want 3", n)
	}
	if n := len(cl.Nodes()); n != 3 {
		t.Fatalf("%d nodes, want 3", n)
	}
	cc := cl.Client(t)

	const keys = 30
	slots := map[int64]bool{}
	for i := range keys {
		k := fmt.Sprintf("key:%d", i)
		if err := cc.Set(ctx(t), k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		slot, err := cc.ClusterKeySlot(ctx(t), k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", k, err)
		}
		slots[slot] = true
	}
	for i := range keys {
		k := fmt.Sprintf("key:%d", i)
		got, err := cc.Get(ctx(t), k).Int()
		if err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, got, err, i)
		}
	}
	if len(slots) < 2 {
		t.Fatalf("keys landed in %d slots", len(slots))
	}
	total := int64(0)
	for _, n := range cl.Nodes() {
		size, err := n.Client(t).DBSize(ctx(t)).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", n.Addr(), err)
		}
		if size == 0 {
			t.Errorf("node %s holds no key", n.Addr())
		}
		total += size
	}
	if total != keys {
		t.Errorf("nodes hold %d keys, want %d", total, keys)
	}

	// A restarted node keeps its slots (nodes.conf) but loses its keys.
	node := cl.Nodes()[1]
	lost, err := node.Client(t).DBSize(ctx(t)).Result()
	if err != nil {
		t.Fatalf("DBSIZE on %s: %v", node.Addr(), err)
	}
	node.Restart(t)
	start = time.Now()
	cl.WaitReady(t)
	t.Logf("WaitReady after Restart of a node took %v", time.Since(start))
	missing := int64(0)
	for i := range keys {
		k := fmt.Sprintf("key:%d", i)
		switch _, err := cc.Get(ctx(t), k).Result(); {
		case errors.Is(err, redis.Nil):
			missing++
		case err != nil:
			t.Fatalf("GET %s after Restart: %v", k, err)
		}
	}
	if missing != lost {
		t.Errorf("%d keys missing after restarting a node that held %d", missing, lost)
	}
	if err := cc.Set(ctx(t), "key:0", "again", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
}

func TestClusterOneMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 1) // fewer than 3: built without redis-cli
	cc := cl.Client(t)
	for _, k := range []string{"a", "b", "c"} {
		if err := cc.Set(ctx(t), k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if n, err := cl.Nodes()[0].Client(t).DBSize(ctx(t)).Result(); err != nil || n != 3 {
		t.Fatalf("DBSIZE = %d, %v; want 3", n, err)
	}
}

func TestStartServerBadArgs(t *testing.T) {
	t.Parallel()
	r := record(t, func(tb testing.TB) { redistest.StartServer(tb, "--no-such-directive", "1") })
	if !r.failed || !strings.Contains(r.msg, "no-such-directive") {
		t.Errorf("StartServer with a bad directive: failed=%v msg=%q", r.failed, r.msg)
	}
}

func TestSharedAddr(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		t.Fatalf("Addr() = %q: %v", addr, err)
	}
	c := redistest.Client(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
}

// recorder is a testing.TB that records Skipf and Fatalf instead of ending
// the real test.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// record runs f with a recorder on its own goroutine (Skipf and Fatalf end
// it) and returns the recorder.
func record(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestUnavailable(t *testing.T) {
	// A loopback port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	t.Setenv("REDIS_ADDR", closed)

	t.Setenv("LATCHKEY_REQUIRE_SERVERS", "")
	if redistest.Require() {
		t.Fatal("Require() with LATCHKEY_REQUIRE_SERVERS unset")
	}
	r := record(t, func(tb testing.TB) { redistest.Unavailable(tb, "no %s", "server") })
	if !r.skipped || r.failed || !strings.Contains(r.msg, "no server") {
		t.Errorf("Unavailable without Require: skipped=%v failed=%v msg=%q", r.skipped, r.failed, r.msg)
	}
	r = record(t, func(tb testing.TB) { redistest.Addr(tb) })
	if !r.skipped || !strings.Contains(r.msg, closed) {
		t.Errorf("Addr with nothing at %s: skipped=%v msg=%q", closed, r.skipped, r.msg)
	}

	t.Setenv("LATCHKEY_REQUIRE_SERVERS", "1")
	if !redistest.Require() {
		t.Fatal("Require() false with LATCHKEY_REQUIRE_SERVERS=1")
	}
	r = record(t, func(tb testing.TB) { redistest.Unavailable(tb, "no %s", "server") })
	if !r.failed || r.skipped || !strings.Contains(r.msg, "no server") {
		t.Errorf("Unavailable with Require: skipped=%v failed=%v msg=%q", r.skipped, r.failed, r.msg)
	}
	r = record(t, func(tb testing.TB) { redistest.Addr(tb) })
	if !r.failed {
		t.Errorf("Addr with nothing at %s and Require: skipped=%v msg=%q", closed, r.skipped, r.msg)
	}
}
