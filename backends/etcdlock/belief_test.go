package etcdlock_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/backends/etcdlock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest/belief"
	"github.com/latchkey/latchkey/internal/faultnet"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestBelief runs the belief checker on a private single-member etcd,
// each Client through a fault proxy of its own, while one Client at a time
// has its connections cut or stalled, and etcd is restarted (SIGKILL,
// then started again on its data directory) now and then. etcd leases
// count whole seconds, and its smallest is one second here: the TTLs are
// one and two seconds.
func TestBelief(t *testing.T) {
	m := startCluster(t, 1)[0]
	upstream := strings.TrimPrefix(m.clientURL, "http://")
	var proxies []*faultnet.Proxy
	for range 3 {
		proxies = append(proxies, faultnet.Start(t, upstream))
	}
	belief.Run(t, belief.Config{
		Clients: len(proxies),
		TTLs:    []time.Duration{time.Second, 2 * time.Second},
		Workers: 16,
		Keys:    []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}, // long holds: more keys, fewer waits
		Open: func(i int, obs core.Observer) (*core.Client, error) {
			cli, err := clientv3.New(clientv3.Config{
				Endpoints:   []string{"http://" + proxies[i].Addr()},
				DialTimeout: 2 * time.Second,
				Logger:      zap.NewNop(),
			})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { cli.Close() }) // after the run closed its Client
			return etcdlock.New(cli, etcdlock.WithClientOptions(core.WithObserver(obs)))
		},
		FaultEvery: 400 * time.Millisecond,
		Faults: []belief.Fault{
			{Name: "cut", Min: 100 * time.Millisecond, Max: 1500 * time.Millisecond, Weight: 3,
				Inject: func(i int) (func(), error) { return proxies[i].Cut(), nil }},
			{Name: "stall", Min: 100 * time.Millisecond, Max: 2 * time.Second, Weight: 3,
				Inject: func(i int) (func(), error) { return proxies[i].Stall(), nil }},
			{Name: "restart", Weight: 1,
				Inject: func(int) (func(), error) { return nil, m.restart() }},
		},
	})
}

// restart kills the member (SIGKILL: a crash) and starts it again with
// the same flags on the same data directory, and waits until it answers.
func (m *member) restart() error {
	m.kill()
	logf, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.cmd.Path, m.cmd.Args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("restart %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done // the test's cleanup (m.kill) kills this one
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := ping(m.clientURL)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("etcd %s exited after restart: %v\n%s", m.name, cmd.ProcessState, logTail(m))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd %s does not answer after restart: %v", m.name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
