package zklock_test

import (
	"bufio"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"go.uber.org/goleak"
)

// The ZooKeeper server of this test binary: one standalone server, started
// by TestMain from the Debian package's jar (or $ZOOKEEPER_CLASSPATH) on a
// free loopback port, with a data directory of its own; killed, and the
// directory removed, when the tests end.
var (
	srv      *zkServer
	srvErr   error
	testRoot = "/latchkey-test-" + strings.ToLower(rand.Text()[:8])
)

func TestMain(m *testing.M) {
	srv, srvErr = startServer()
	if srvErr != nil && !redistest.Require() {
		// The examples need the server and cannot skip themselves.
		fmt.Fprintf(os.Stderr, "zklock: no ZooKeeper (%v): the tests that need one skip, the examples do not run\n", srvErr)
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	code := 0
	func() {
		defer func() {
			if srv != nil {
				srv.kill()
				os.RemoveAll(srv.dir)
			}
		}()
		code = m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server returns the test server's address, or skips (fails with
// LATCHKEY_REQUIRE_SERVERS=1) saying why there is none.
func server(t testing.TB) *zkServer {
	t.Helper()
	if srvErr != nil {
		redistest.Unavailable(t, "no ZooKeeper server could be started: %v", srvErr)
	}
	return srv
}

type zkServer struct {
	java, classpath, dir, cfg, addr string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// classpath finds ZooKeeper's jar: $ZOOKEEPER_CLASSPATH, or Debian's
// (apt-get install zookeeper), whose manifest names its dependencies.
func classpath() (string, error) {
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return cp, nil
	}
	const deb = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(deb); err != nil {
		return "", fmt.Errorf("%s not found (apt-get install zookeeper, or set ZOOKEEPER_CLASSPATH)", deb)
	}
	return deb, nil
}

func startServer() (*zkServer, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("java is not on PATH: %w", err)
	}
	cp, err := classpath()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "zklock-test")
	if err != nil {
		return nil, err
	}
	s := &zkServer{java: java, classpath: cp, dir: dir, cfg: filepath.Join(dir, "zoo.cfg"), addr: fmt.Sprintf("127.0.0.1:%d", port)}
	// tickTime 500 ms: sessions of 1 s to 120 s are granted as asked.
	cfg := fmt.Sprintf("tickTime=500\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"minSessionTimeout=1000\nmaxSessionTimeout=120000\n4lw.commands.whitelist=srvr\nforceSync=no\n", filepath.Join(dir, "data"), port)
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.start(); err != nil {
		s.kill()
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// start runs the server and waits until it serves.
func (s *zkServer) start() error {
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.java, "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.admin.enableServer=false",
		"-cp", s.classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", s.cfg)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start java: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(40 * time.Second)
	for !s.serving() {
		select {
		case <-exited:
			out, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("the server exited at start: %s", lastLines(string(out), 5))
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("the server did not serve within 40s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// kill stops the server at once (SIGKILL: a crash; its data directory
// keeps every committed write) and waits for it to exit.
func (s *zkServer) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}

// serving asks the server's srvr command whether it serves.
func (s *zkServer) serving() bool {
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return false
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Mode:") {
			return true
		}
	}
	return false
}

// quiet drops the client library's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// connect opens a session of the given timeout to addr, closed when the
// test ends.
func connect(t testing.TB, addr string, timeout time.Duration) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, timeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	for deadline := time.Now().Add(10 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no session with %s within 10s (state %v)", addr, conn.State())
		}
	}
	return conn
}

// sessionTimeout is that of the tests' sessions: the leases may last up
// to two thirds of it, the minute some conformance tests hold a lock.
const sessionTimeout = 90 * time.Second

// newClient makes a Client on a session of its own (as another process
// would have), under the tests' root; both are closed when the test ends.
func newClient(t testing.TB, opts ...zklock.Option) *core.Client {
	t.Helper()
	conn := connect(t, server(t).addr, sessionTimeout)
	opts = append([]zklock.Option{zklock.WithSessionTimeout(sessionTimeout), zklock.WithRoot(testRoot)}, opts...)
	c, err := zklock.New(conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
