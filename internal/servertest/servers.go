package servertest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// probeTimeout bounds one readiness probe.
const probeTimeout = time.Second

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// StartEtcd starts a one-member etcd (Debian's etcd-server installs
// /usr/bin/etcd) with a 50 ms heartbeat and a 500 ms election timeout —
// so its smallest lease TTL is one second — and returns its client URL,
// "http://127.0.0.1:<port>", once it has a leader.
func StartEtcd(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/etcd"); serr != nil {
			redistest.Unavailable(t, "etcd is not on PATH (apt-get install etcd-server)")
		}
		bin = "/usr/bin/etcd"
	}
	ports := start(t, spec{
		name: "etcd", ports: 2, within: 20 * time.Second,
		command: func(dir string, ports []int) (string, []string, error) {
			curl, purl := "http://"+loopback(ports[0]), "http://"+loopback(ports[1])
			return bin, []string{
				"--name", "m0", "--data-dir", filepath.Join(dir, "data"),
				"--listen-client-urls", curl, "--advertise-client-urls", curl,
				"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
				"--initial-cluster", "m0=" + purl, "--initial-cluster-state", "new",
				"--initial-cluster-token", fmt.Sprintf("servertest-%d", time.Now().UnixNano()),
				"--heartbeat-interval", "50", "--election-timeout", "500",
				"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
			}, nil
		},
		ready: func(ports []int, pid int) error { return etcdHealthy(loopback(ports[0])) },
	})
	return "http://" + loopback(ports[0])
}

// etcdHealthy asks etcd's /health, which says {"health":"true"} once the
// member has a leader.
func etcdHealthy(addr string) error {
	reply, err := roundTrip(addr, "GET /health HTTP/1.0\r\nHost: "+addr+"\r\n\r\n", "")
	if err != nil {
		return err
	}
	if !strings.Contains(reply, `"health":"true"`) {
		return fmt.Errorf("etcd /health: %q", lastLine(reply))
	}
	return nil
}

// StartZooKeeper starts a standalone ZooKeeper from Debian's jar,
// /usr/share/java/zookeeper.jar (apt-get install zookeeper), or
// $ZOOKEEPER_CLASSPATH, with a 500 ms tick — it grants sessions of 1 s to
// 120 s as asked — and returns its address, "127.0.0.1:<port>", once it
// serves.
func StartZooKeeper(t testing.TB) string {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		redistest.Unavailable(t, "java is not on PATH (ZooKeeper needs it): %v", err)
	}
	cp := os.Getenv("ZOOKEEPER_CLASSPATH")
	if cp == "" {
		const deb = "/usr/share/java/zookeeper.jar"
		if _, err := os.Stat(deb); err != nil {
			redistest.Unavailable(t, "%s not found (apt-get install zookeeper, or set ZOOKEEPER_CLASSPATH)", deb)
		}
		cp = deb
	}
	ports := start(t, spec{
		name: "zookeeper", ports: 1, within: 40 * time.Second,
		command: func(dir string, ports []int) (string, []string, error) {
			cfg := filepath.Join(dir, "zoo.cfg")
			err := os.WriteFile(cfg, fmt.Appendf(nil, "tickTime=500\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
				"minSessionTimeout=1000\nmaxSessionTimeout=120000\n4lw.commands.whitelist=srvr\nforceSync=no\n",
				filepath.Join(dir, "data"), ports[0]), 0o600)
			return java, []string{"-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
				"-Dzookeeper.admin.enableServer=false",
				"-cp", cp, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg}, err
		},
		ready: func(ports []int, pid int) error {
			reply, err := roundTrip(loopback(ports[0]), "srvr", "")
			if err == nil && !strings.Contains(reply, "\nMode:") {
				err = fmt.Errorf("zookeeper srvr: %q", lastLine(reply))
			}
			return err
		},
	})
	return loopback(ports[0])
}

// StartMemcached starts a memcached (apt-get install memcached) with one
// thread and 32 MB, and returns its address, "127.0.0.1:<port>", once it
// answers.
func StartMemcached(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		redistest.Unavailable(t, "memcached is not on PATH (apt-get install memcached): %v", err)
	}
	ports := start(t, spec{
		name: "memcached", ports: 1, within: 5 * time.Second,
		command: func(dir string, ports []int) (string, []string, error) {
			args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-U", "0", "-m", "32", "-t", "1", "-c", "512"}
			if os.Geteuid() == 0 { // memcached refuses to run as root without -u
				u, err := user.Current()
				if err != nil {
					return "", nil, err
				}
				args = append(args, "-u", u.Username)
			}
			return bin, args, nil
		},
		ready: func(ports []int, pid int) error { return memcachedIs(loopback(ports[0]), pid) },
	})
	return loopback(ports[0])
}

// memcachedIs asks the memcached on addr for its stats and checks that it
// is pid: not another process that holds the port.
func memcachedIs(addr string, pid int) error {
	reply, err := roundTrip(addr, "stats\r\n", "END")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(reply, "\r\n") {
		if p, ok := strings.CutPrefix(line, "STAT pid "); ok {
			if p != strconv.Itoa(pid) {
				return fmt.Errorf("%s is answered by pid %s, not %d", addr, p, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("memcached stats without a pid: %q", lastLine(reply))
}

// roundTrip sends req to addr and returns what the server answers: up to
// and including the line end, or, if end is "", until it closes the
// connection.
func roundTrip(addr, req, end string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := io.WriteString(c, req); err != nil {
		return "", err
	}
	if end == "" {
		b, err := io.ReadAll(c)
		return string(b), err
	}
	var sb strings.Builder
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			return sb.String(), err
		}
		if strings.TrimSpace(line) == end {
			return sb.String(), nil
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
