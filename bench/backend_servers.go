package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errUnavailable marks a backend that cannot run here (no server binary, no
// server answering); the section skips it and says why.
var errUnavailable = errors.New("unavailable")

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUnavailable, fmt.Sprintf(format, args...))
}

// proc is a server process this program started: in the foreground, in a
// process group of its own, killed by its PID at the end (and by the kernel
// if this program dies first).
type proc struct {
	name string
	cmd  *exec.Cmd
	dir  string // removed by stop
	log  string
	done chan struct{}
}

func startProc(name, dir, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, dir: dir, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// waitFor polls ready until it succeeds, the process exits, or within passes.
func (p *proc) waitFor(within time.Duration, ready func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start: %s", p.name, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v: %v: %s", p.name, within, err, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the process (it keeps no state worth a clean shutdown), waits
// for it, and removes its directory.
func (p *proc) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	os.RemoveAll(p.dir)
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return strings.TrimSpace(string(b))
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// startEtcd starts a one-member etcd (Debian's etcd-server: /usr/bin/etcd)
// with the timing the etcdlock tests use. It returns the client URL.
func startEtcd() (*proc, string, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/etcd"); serr != nil {
			return nil, "", unavailable("etcd is not on PATH (apt-get install etcd-server)")
		}
		bin = "/usr/bin/etcd"
	}
	dir, err := os.MkdirTemp("", "lkbench-etcd-")
	if err != nil {
		return nil, "", err
	}
	cport, err1 := freePort()
	pport, err2 := freePort()
	if err := errors.Join(err1, err2); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	curl, purl := "http://"+loopback(cport), "http://"+loopback(pport)
	p, err := startProc("etcd", dir, bin,
		"--name", "m0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "m0="+purl, "--initial-cluster-state", "new",
		"--heartbeat-interval", "50", "--election-timeout", "500",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	// /health answers {"health":"true"} once there is a leader.
	err = p.waitFor(20*time.Second, func() error {
		resp, err := (&http.Client{Timeout: time.Second}).Get(curl + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"true"`) {
			return fmt.Errorf("health: %s", b)
		}
		return nil
	})
	if err != nil {
		p.stop()
		return nil, "", err
	}
	return p, curl, nil
}

// zkClasspath is ZooKeeper's jar: $ZOOKEEPER_CLASSPATH, or Debian's.
func zkClasspath() (string, error) {
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return cp, nil
	}
	const deb = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(deb); err != nil {
		return "", unavailable("%s not found (apt-get install zookeeper, or set ZOOKEEPER_CLASSPATH)", deb)
	}
	return deb, nil
}

// startZooKeeper starts a standalone ZooKeeper as the zklock tests do
// (tickTime 500 ms, forceSync=no) and returns its address.
func startZooKeeper() (*proc, string, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, "", unavailable("java is not on PATH")
	}
	cp, err := zkClasspath()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "lkbench-zk-")
	if err != nil {
		return nil, "", err
	}
	cfgPath := filepath.Join(dir, "zoo.cfg")
	cfg := fmt.Sprintf("tickTime=500\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"minSessionTimeout=1000\nmaxSessionTimeout=120000\n4lw.commands.whitelist=srvr\nforceSync=no\n",
		filepath.Join(dir, "data"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	p, err := startProc("zookeeper", dir, java, "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.admin.enableServer=false",
		"-cp", cp, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	addr := loopback(port)
	if err := p.waitFor(40*time.Second, func() error { _, err := zkSrvr(addr); return err }); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addr, nil
}

// zkSrvr runs ZooKeeper's srvr command and returns its "Name: value" lines.
func zkSrvr(addr string) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if _, ok := out["Mode"]; !ok {
		return nil, errors.New("srvr: no Mode line yet")
	}
	return out, sc.Err()
}

// startMemcached starts a memcached as the memcachelock tests do (one
// thread, 32 MB) and returns its address.
func startMemcached() (*proc, string, error) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return nil, "", unavailable("memcached is not on PATH (apt-get install memcached)")
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "lkbench-memcached-")
	if err != nil {
		return nil, "", err
	}
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", "32", "-t", "1", "-c", "512"}
	if os.Geteuid() == 0 { // memcached refuses to run as root without -u
		if u, err := user.Current(); err == nil {
			args = append(args, "-u", u.Username)
		}
	}
	p, err := startProc("memcached", dir, bin, args...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	addr := loopback(port)
	if err := p.waitFor(5*time.Second, func() error { _, err := memcachedStats(addr); return err }); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addr, nil
}

// memcachedStats runs memcached's stats command.
func memcachedStats(addr string) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "stats\r\n"); err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "END" {
			return out, nil
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("stats: no END")
}
