package sqllock_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
)

// A pgPrivate is a PostgreSQL instance of one test: initdb'd into a
// temporary directory, listening on a free loopback port, stopped and
// removed when the test ends. Only the belief test's restarts need one.
type pgPrivate struct {
	bin, dir, port string
	owner          *user.User // the user it runs as when the test runs as root
}

// startPGPrivate starts one, or skips saying why it cannot (the binaries
// are missing; the test runs as root and there is no postgres user).
func startPGPrivate(t *testing.T) *pgPrivate {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Skip("no private PostgreSQL: /usr/lib/postgresql/*/bin/pg_ctl not found")
	}
	p := &pgPrivate{bin: filepath.Dir(bins[len(bins)-1])}
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("no private PostgreSQL: running as root and no postgres user to run it as: %v", err)
		}
		p.owner = u
	}
	dir, err := os.MkdirTemp("", "sqllock-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p.dir = dir
	if p.owner != nil {
		uid, _ := strconv.Atoi(p.owner.Uid)
		gid, _ := strconv.Atoi(p.owner.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Skipf("no private PostgreSQL: chown %s: %v", dir, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.port = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	if out, err := p.run("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "-N"); err != nil {
		t.Skipf("no private PostgreSQL: initdb: %v\n%s", err, out)
	}
	if err := p.start(); err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
	t.Cleanup(func() { p.run("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "stop") })
	return p
}

func (p *pgPrivate) data() string { return filepath.Join(p.dir, "data") }

// DSN is the URL of its postgres database.
func (p *pgPrivate) DSN() string {
	return "postgres://postgres@127.0.0.1:" + p.port + "/postgres?sslmode=disable"
}

// start starts the server and waits until it accepts connections.
func (p *pgPrivate) start() error {
	out, err := p.run("pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "log"), "-w", "-t", "30",
		"-o", "-p "+p.port+" -k "+p.dir+" -c listen_addresses=127.0.0.1 -c fsync=off", "start")
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	return nil
}

// restart stops the server at once (immediate: no checkpoint, as a
// crash) and starts it again on its data directory.
func (p *pgPrivate) restart() error {
	if out, err := p.run("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return p.start()
}

// run runs one of PostgreSQL's programs, as its owner when the test runs
// as root.
func (p *pgPrivate) run(prog string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, prog)
	var cmd *exec.Cmd
	if p.owner != nil {
		cmd = exec.Command("runuser", append([]string{"-u", p.owner.Username, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = p.dir
	return cmd.CombinedOutput()
}
