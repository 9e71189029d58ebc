package redistest

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// startAttempts bounds how many ports StartServer tries when the chosen
	// port is taken before redis-server binds it.
	startAttempts = 5
	// restartTimeout bounds how long Restart keeps retrying while the
	// server's port is taken by another process.
	restartTimeout = 5 * time.Second
)

// Server is a redis-server process started by a test on a free loopback
// port, with --save "" --appendonly no (no persistence) and its own
// directory (t.TempDir()), holding its log (redis.log). It is stopped with
// SIGKILL, and reaped, in t.Cleanup of the test that started it.
//
// Its methods may be called from any goroutine.
type Server struct {
	bin     string   // path of redis-server
	dir     string   // working and data directory
	logPath string   // stdout and stderr of every run
	extra   []string // extra arguments from the caller
	cluster bool     // started as a cluster node
	monitor string   // sentinel mode: "<master name> <host> <port>"
	port    int      // set before StartServer returns, then constant

	mu     sync.Mutex
	proc   *process // nil when not running
	paused bool
}

// StartServer starts a redis-server on a free 127.0.0.1 port and waits
// (at most 5 s) until it answers; it fails the test if it does not. It calls
// [Unavailable] if redis-server is not on PATH.
//
// extraArgs are appended to the command line, as "--name", "value" pairs,
// after this package's own options (--port, --bind 127.0.0.1, --save "",
// --appendonly no, --dir), which they can therefore override; for example
// StartServer(t, "--maxmemory", "10mb").
func StartServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return startServer(t, false, extraArgs)
}

// StartSentinel starts a Redis Sentinel on a free 127.0.0.1 port that
// monitors master under the name masterName (quorum 1, the master deemed
// down after 1 s), and waits until it answers. Stop and restart it like a
// Server. Use it with redis.NewFailoverClient.
func StartSentinel(t testing.TB, master *Server, masterName string) *Server {
	t.Helper()
	return startNode(t, false, masterName+" 127.0.0.1 "+strconv.Itoa(master.Port()), nil)
}

// startServer starts a server, as a cluster node if cluster is true.
func startServer(t testing.TB, cluster bool, extraArgs []string) *Server {
	t.Helper()
	return startNode(t, cluster, "", extraArgs)
}

// startNode starts a server, a cluster node or a sentinel.
func startNode(t testing.TB, cluster bool, monitor string, extraArgs []string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server is not on PATH: %v", err)
	}
	dir := t.TempDir() // created before the Cleanup below, so removed after it
	s := &Server{
		bin:     bin,
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		extra:   append([]string(nil), extraArgs...),
		cluster: cluster,
		monitor: monitor,
	}
	t.Cleanup(func() { s.cleanup(t) })

	var lastErr error
	for range startAttempts {
		port, err := reservePorts()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		err = s.startOn(port)
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortInUse) {
			t.Fatalf("redistest: start redis-server on 127.0.0.1:%d: %v\nlast lines of %s:\n%s",
				port, err, s.logPath, logTail(s.logPath, tailLines))
		}
		lastErr = err
	}
	t.Fatalf("redistest: start redis-server: %d ports were taken before it could bind them; last: %v\nlast lines of %s:\n%s",
		startAttempts, lastErr, s.logPath, logTail(s.logPath, tailLines))
	return nil
}

// startOn starts the server on port, reserved by reservePorts; on failure
// it releases the port.
func (s *Server) startOn(port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.port = port
	err := s.startLocked()
	if err != nil {
		releasePorts(port)
		s.port = 0
	}
	return err
}

// args returns the command line of the server.
func (s *Server) args() []string {
	if s.monitor != "" {
		// A sentinel rewrites its config file: give it a fresh one.
		conf := filepath.Join(s.dir, "sentinel.conf")
		name := strings.Fields(s.monitor)[0]
		text := "sentinel monitor " + s.monitor + " 1\n" +
			"sentinel down-after-milliseconds " + name + " 1000\n" +
			"sentinel failover-timeout " + name + " 2000\n"
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			panic(err) // a temp dir of our own that cannot be written
		}
		return append([]string{conf, "--sentinel",
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--dir", s.dir,
			"--daemonize", "no",
			"--logfile", "",
		}, s.extra...)
	}
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	}
	if s.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		)
	}
	return append(a, s.extra...)
}

// startLocked starts redis-server on s.port and waits until it answers. On
// failure no process is left running and the error wraps errPortInUse if the
// port was taken. s.mu must be held and no process running.
func (s *Server) startLocked() error {
	offset := logSize(s.logPath)
	p, err := launch(s.bin, s.dir, s.logPath, s.args())
	if err != nil {
		return err
	}
	s.proc = p
	s.paused = false
	err = p.waitReady(s.Addr(), readyTimeout)
	if err == nil {
		return nil
	}
	if kerr := p.kill(killTimeout); kerr != nil {
		return errors.Join(err, kerr) // s.proc stays set: cleanup retries
	}
	s.proc = nil
	if portInUse(logSince(s.logPath, offset)) {
		return errors.Join(errPortInUse, err)
	}
	return err
}

// stopLocked kills the running process, if any, and reaps it. s.mu must be
// held.
func (s *Server) stopLocked() error {
	if s.proc == nil {
		return nil
	}
	if err := s.proc.kill(killTimeout); err != nil {
		return err
	}
	s.proc = nil
	s.paused = false
	return nil
}

// cleanup stops the server at the end of the test that started it.
func (s *Server) cleanup(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Errorf("redistest: stop redis-server %s: %v", s.Addr(), err)
	}
	if s.port != 0 {
		releasePorts(s.port)
		if t.Failed() {
			t.Logf("redistest: last lines of the log of redis-server %s:\n%s", s.Addr(), logTail(s.logPath, tailLines))
		}
	}
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Kill and Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int {
	return s.port
}

// Dir returns the server's directory, which holds its log, redis.log (and,
// for a cluster node, nodes.conf). It is removed when the test ends.
func (s *Server) Dir() string {
	return s.dir
}

// Client returns a *redis.Client on the server, closed in t.Cleanup.
//
// The client is created with ContextTimeoutEnabled, so context deadlines
// bound its commands; other options are go-redis defaults.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	return newClient(t, s.Addr())
}

// Kill sends SIGKILL to the server and waits until it has exited: its port
// is then free, and its data gone. Kill does nothing if the server is not
// running, so it is safe to call repeatedly.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Fatalf("redistest: kill redis-server %s: %v", s.Addr(), err)
	}
}

// Restart kills the server if it is running (even paused), starts it again
// on the same port, empty (there is no persistence), and waits until it
// answers. A cluster node keeps its nodes.conf, so it rejoins its cluster
// with its node ID and slots (but no keys). If another process took the port
// meanwhile, Restart retries for a few seconds, then fails the test.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Fatalf("redistest: restart redis-server %s: %v", s.Addr(), err)
	}
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.startLocked()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			t.Fatalf("redistest: restart redis-server %s: %v\nlast lines of %s:\n%s",
				s.Addr(), err, s.logPath, logTail(s.logPath, tailLines))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause stops the server process with SIGSTOP, to simulate a hung node: it
// keeps its port and the kernel still accepts connections, but nothing is
// answered until [Server.Resume]. It fails the test if the server is not
// running. Kill, Restart and the cleanup work on a paused server.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("redistest: pause redis-server %s: not running", s.Addr())
	}
	if err := s.proc.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: pause redis-server %s: %v", s.Addr(), err)
	}
	s.paused = true
}

// Resume continues a server stopped by [Server.Pause] with SIGCONT. It does
// nothing if the server is not paused (or not running).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.paused {
		return
	}
	if err := s.proc.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: resume redis-server %s: %v", s.Addr(), err)
	}
	s.paused = false
}
