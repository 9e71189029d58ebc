package memcachelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	// readyTimeout bounds the wait for a started memcached to answer.
	readyTimeout = 5 * time.Second
	// killTimeout bounds the wait for a killed memcached to be reaped.
	killTimeout = 10 * time.Second
)

// server is a memcached the test started on a loopback port of its own,
// killed when the test ends.
type server struct {
	t    testing.TB
	bin  string
	port int
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait returned
}

// startServer starts a memcached on a free loopback port, or skips (fails
// with LATCHKEY_REQUIRE_SERVERS=1) when there is no memcached binary.
func startServer(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		redistest.Unavailable(t, "memcached is not on PATH (Debian: apt-get install memcached): %v", err)
	}
	s := &server{t: t, bin: bin, log: filepath.Join(t.TempDir(), "memcached.log")}
	t.Cleanup(s.kill)
	var lastErr error
	for range 5 { // a free port may be taken before memcached binds it
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("memcached did not start: %v\n%s", lastErr, s.logTail())
	return nil
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs memcached on s.port and waits until it answers.
func (s *server) start() error {
	f, err := os.OpenFile(s.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "0", "-m", "32", "-t", "1", "-c", "512"}
	if os.Geteuid() == 0 { // memcached refuses to run as root without -u
		u, err := user.Current()
		if err != nil {
			return err
		}
		args = append(args, "-u", u.Username)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("memcached exited: %v", cmd.ProcessState)
		default:
		}
		err := s.probe(cmd.Process.Pid)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("memcached (pid %d) did not answer on %s within %v: %v", cmd.Process.Pid, s.addr(), readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probe asks the server for its stats and checks that it is pid (not
// another process that holds the port).
func (s *server) probe(pid int) error {
	c, err := net.DialTimeout("tcp", s.addr(), 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("stats\r\n")); err != nil {
		return err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "END" {
			break
		}
		if p, ok := strings.CutPrefix(line, "STAT pid "); ok && p != strconv.Itoa(pid) {
			return fmt.Errorf("%s is answered by pid %s, not %d", s.addr(), p, pid)
		}
	}
	return sc.Err()
}

// kill SIGKILLs the server, if it runs, and waits until it is reaped.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Errorf("kill memcached: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(killTimeout):
		s.t.Errorf("memcached pid %d did not exit within %v of SIGKILL", s.cmd.Process.Pid, killTimeout)
	}
	s.cmd = nil
}

// restart kills the server (kill -9: everything it held is gone) and
// starts an empty one on the same port.
func (s *server) restart() {
	s.t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("restart: %v\n%s", err, s.logTail())
	}
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// newMC returns a memcache client of s, closed when the test ends.
func newMC(t testing.TB, s *server) *memcache.Client {
	mc := memcache.New(s.addr())
	mc.Timeout = 2 * time.Second // -race on shared cores
	mc.MaxIdleConns = 16
	t.Cleanup(func() { mc.Close() })
	return mc
}

// newClient makes a Client on mc with opts, closed when the test ends.
func newClient(t testing.TB, mc *memcache.Client, opts ...memcachelock.Option) *core.Client {
	t.Helper()
	c, err := memcachelock.New(mc, opts...)
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
