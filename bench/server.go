package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// servers are private redis-server processes started by this program. They
// run in the foreground (no --daemonize), so stop can end exactly the
// processes it started and reap them.
type servers struct {
	addrs []string
	cmds  []*exec.Cmd
	dir   string
}

// redisServerPath is the redis-server binary; REDIS_SERVER overrides it.
func redisServerPath() string {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	return "/usr/bin/redis-server"
}

// spawnServers starts n redis-servers on free loopback ports, without
// persistence, and waits until each answers PING.
func spawnServers(n int) (*servers, error) {
	dir, err := os.MkdirTemp("", "lkbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &servers{dir: dir}
	for i := range n {
		port, err := freePort()
		if err != nil {
			s.stop()
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cmd := exec.Command(redisServerPath(),
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", i)))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			s.stop()
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		s.cmds = append(s.cmds, cmd)
		s.addrs = append(s.addrs, addr)
		if err := waitReady(addr, 5*time.Second); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

// stop terminates the servers this value started, by their own PIDs.
func (s *servers) stop() {
	for _, c := range s.cmds {
		if c.Process == nil {
			continue
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
	s.cmds = nil
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitReady(addr string, within time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("redis-server on %s did not answer", addr), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
