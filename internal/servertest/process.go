package servertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// killTimeout bounds the wait for a SIGKILLed server to be reaped.
	killTimeout = 10 * time.Second
	// pollInterval is the pause between two readiness probes.
	pollInterval = 50 * time.Millisecond
	// attempts is how many times a server is started on fresh ports: a
	// free port may be taken by someone else before the server binds it.
	attempts = 3
)

// process is one server started by a test.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once cmd.Wait has returned
}

// launch starts bin with args, its output going to a log under dir, and
// registers its kill with t.Cleanup.
func launch(t testing.TB, name, dir, bin string, args ...string) (*process, error) {
	t.Helper()
	p := &process{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = f, f // *os.File: no copying goroutine
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.kill(); err != nil {
			t.Errorf("servertest: %v", err)
		}
	})
	return p, nil
}

// waitReady polls ready until it succeeds, the process exits, or within
// has passed.
func (p *process) waitReady(within time.Duration, ready func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it answered (%v):\n%s", p.name, p.cmd.ProcessState, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not answer within %v: %v\n%s", p.name, p.cmd.Process.Pid, within, err, p.logTail())
		}
		time.Sleep(pollInterval)
	}
}

// kill SIGKILLs the process (no server here keeps state worth a clean
// shutdown) and waits until it is reaped.
func (p *process) kill() error {
	_ = p.cmd.Process.Kill() // os.ErrProcessDone once it has exited
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("%s pid %d did not exit within %v of SIGKILL", p.name, p.cmd.Process.Pid, killTimeout)
	}
}

func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\t" + strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n\t")
}

// A spec says how to run one kind of server.
type spec struct {
	name   string
	ports  int           // how many loopback ports it listens on
	within time.Duration // how long it may take to answer
	// command returns the program and arguments of a server on ports,
	// with dir (empty, the server's own) for its files.
	command func(dir string, ports []int) (bin string, args []string, err error)
	// ready probes the server on ports, whose process is pid.
	ready func(ports []int, pid int) error
}

// start runs the server of s on fresh ports until it answers, and returns
// the ports it runs on; it is killed when the test ends. A server that
// exits before it answers is tried again on other ports, attempts times in
// all; one that runs without answering within s.within fails the test.
func start(t testing.TB, s spec) []int {
	t.Helper()
	var lastErr error
	for range attempts {
		ports := make([]int, s.ports)
		for i := range ports {
			ports[i] = freePort(t)
		}
		dir := t.TempDir()
		bin, args, err := s.command(dir, ports)
		if err != nil {
			t.Fatalf("servertest: %s: %v", s.name, err)
		}
		p, err := launch(t, s.name, dir, bin, args...)
		if err != nil {
			t.Fatalf("servertest: %v", err)
		}
		if lastErr = p.waitReady(s.within, func() error { return s.ready(ports, p.cmd.Process.Pid) }); lastErr == nil {
			return ports
		}
		select {
		case <-p.done: // exited at start: most likely a port taken meanwhile
		default:
			t.Fatalf("servertest: %v", lastErr) // killed at cleanup
		}
	}
	t.Fatalf("servertest: %v", lastErr)
	return nil
}

// freePort returns a loopback port nobody listened on a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servertest: no loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
