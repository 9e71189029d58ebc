package etcdlock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Timing of the etcd members the tests start: a short election timeout
// makes a failover take about a second, and etcd's smallest lease TTL
// (1.5 election timeouts, rounded up to a second) one second.
const (
	heartbeatMs = 50
	electionMs  = 500
)

// A member is one etcd process started by a test.
type member struct {
	name      string
	clientURL string
	peerURL   string
	dir       string
	logPath   string
	cmd       *exec.Cmd
	done      chan struct{}
}

// etcdBinary finds etcd (Debian's etcd-server package installs
// /usr/bin/etcd), or skips the test saying why (fails with
// LATCHKEY_REQUIRE_SERVERS=1).
func etcdBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	redistest.Unavailable(t, "etcd is not on PATH (apt-get install etcd-server)")
	return ""
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts n etcd members on free loopback ports, each with a
// data directory of its own, and waits until every one answers. Every
// process is killed, and its directory removed, when the test ends.
func startCluster(t testing.TB, n int) []*member {
	t.Helper()
	bin := etcdBinary(t)
	root := t.TempDir() // removed after the cleanups below kill the processes
	ms := make([]*member, n)
	var initial []string
	for i := range ms {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			dir:       filepath.Join(root, fmt.Sprintf("m%d", i)),
			done:      make(chan struct{}),
		}
		m.logPath = m.dir + ".log"
		ms[i] = m
		initial = append(initial, m.name+"="+m.peerURL)
	}
	token := fmt.Sprintf("latchkey-%d", time.Now().UnixNano())
	for _, m := range ms {
		logf, err := os.Create(m.logPath)
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin,
			"--name", m.name,
			"--data-dir", m.dir,
			"--listen-client-urls", m.clientURL,
			"--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", m.peerURL,
			"--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--heartbeat-interval", fmt.Sprint(heartbeatMs),
			"--election-timeout", fmt.Sprint(electionMs),
			"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
		)
		m.cmd.Stdout, m.cmd.Stderr = logf, logf
		if err := m.cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("start %s: %v", bin, err)
		}
		go func() {
			_ = m.cmd.Wait()
			logf.Close()
			close(m.done)
		}()
		t.Cleanup(m.kill)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range ms {
		for {
			err := ping(m.clientURL)
			if err == nil {
				break
			}
			select {
			case <-m.done:
				t.Fatalf("etcd %s exited: %v\n%s", m.name, m.cmd.ProcessState, logTail(m))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd %s does not answer: %v\n%s", m.name, err, logTail(m))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return ms
}

// startEtcd starts a single-member etcd and returns its client URL.
func startEtcd(t testing.TB) string {
	t.Helper()
	return startCluster(t, 1)[0].clientURL
}

// ping is a linearizable read on one member (it needs a leader).
func ping(endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "latchkey-ping")
	return err
}

func (m *member) kill() {
	if m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
	}
	<-m.done
}

func logTail(m *member) string {
	b, _ := os.ReadFile(m.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// newCli connects to endpoints; the connection is closed when the test
// ends (after the Clients made on it, whose cleanups run first).
func newCli(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newClient makes a Client on cli, closed when the test ends.
func newClient(t testing.TB, cli *clientv3.Client, opts ...etcdlock.Option) *core.Client {
	t.Helper()
	c, err := etcdlock.New(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
