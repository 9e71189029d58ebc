package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds the wait for a started redis-server to answer.
	readyTimeout = 5 * time.Second
	// killTimeout bounds the wait for a SIGKILLed process to be reaped.
	killTimeout = 10 * time.Second
	// pollInterval is the pause between two readiness probes.
	pollInterval = 10 * time.Millisecond
	// probeTimeout bounds one readiness probe.
	probeTimeout = 250 * time.Millisecond
	// tailLines is how many log lines go into failure messages.
	tailLines = 20
)

var (
	// errPortInUse: redis-server exited because its port (or its cluster
	// bus port) was taken; the caller may retry.
	errPortInUse = errors.New("port already in use")
	// errExited: redis-server exited before it answered.
	errExited = errors.New("redis-server exited before answering")
)

// process is one run of a redis-server, owned by this package.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned and err is set
	err  error         // cmd.Wait's result; read it only after done
}

// launch starts bin with args in dir, with stdout and stderr appended to
// logPath. A goroutine waits for the process; it ends when the process does.
func launch(bin, dir, logPath string, args []string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	fmt.Fprintf(f, "--- redistest: %s %s\n", bin, quoteArgs(args))

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = f // an *os.File: exec starts no copying goroutine
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended (and been reaped).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process unless it has already ended.
func (p *process) signal(sig os.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// kill sends SIGKILL (which also ends a stopped process) and waits, at most
// timeout, until the process has been reaped: then its sockets are closed.
func (p *process) kill(timeout time.Duration) error {
	if err := p.signal(syscall.SIGKILL); err != nil && !p.exited() {
		return fmt.Errorf("kill pid %d: %w", p.cmd.Process.Pid, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, timeout)
	}
}

// waitReady waits, at most timeout, until the redis-server of p answers
// INFO on addr, and checks that the answer comes from p itself (not from
// another process that holds the port). It returns errExited if p ends first.
func (p *process) waitReady(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := strconv.Itoa(p.cmd.Process.Pid)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("%w (%v)", errExited, p.err)
		}
		reply, err := command(addr, probeTimeout, "INFO", "server")
		if err == nil {
			if pid := parseInfo(reply)["process_id"]; pid == want {
				return nil
			} else {
				err = fmt.Errorf("%s is answered by pid %s, not by pid %s", addr, pid, want)
			}
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %s) did not answer on %s within %v: %v", want, addr, timeout, lastErr)
		}
		time.Sleep(pollInterval)
	}
}

// logSize returns the size of the file at path, or 0.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the content of the file at path from offset on.
func logSince(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return b
}

// logTail returns the last n lines of the file at path, indented, for
// failure messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "\t(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\t" + strings.Join(lines, "\n\t")
}

// portInUse reports whether a log excerpt says that a bind failed because
// the address was in use.
func portInUse(log []byte) bool {
	return bytes.Contains(log, []byte("Address already in use"))
}

// quoteArgs renders args for the log, quoting the empty ones.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
