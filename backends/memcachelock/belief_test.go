package memcachelock_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/latchkey/latchkey/backends/memcachelock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest/belief"
	"github.com/latchkey/latchkey/internal/faultnet"
)

// beliefConfig is a belief run on a memcached of its own, each Client
// through a fault proxy of its own.
func beliefConfig(t *testing.T, s *server) belief.Config {
	t.Helper()
	ns := "belief" + strings.ToLower(rand.Text()[:8])
	var proxies []*faultnet.Proxy
	for range 3 {
		proxies = append(proxies, faultnet.Start(t, s.addr()))
	}
	return belief.Config{
		Clients: len(proxies),
		Open: func(i int, obs core.Observer) (*core.Client, error) {
			mc := memcache.New(proxies[i].Addr())
			mc.Timeout = time.Second
			mc.MaxIdleConns = 16
			t.Cleanup(func() { mc.Close() })
			return memcachelock.New(mc, memcachelock.WithNamespace(ns), memcachelock.WithClientOptions(core.WithObserver(obs)))
		},
		Faults: []belief.Fault{
			{Name: "cut", Min: 50 * time.Millisecond, Max: time.Second,
				Inject: func(i int) (func(), error) { return proxies[i].Cut(), nil }},
			{Name: "stall", Min: 50 * time.Millisecond, Max: 1500 * time.Millisecond,
				Inject: func(i int) (func(), error) { return proxies[i].Stall(), nil }},
		},
	}
}

// TestBelief runs the belief checker while one Client at a time has its
// connections cut or stalled: no holder believes past another's
// acquisition. A restart is not among the faults: memcached forgets every
// lease when it restarts and lets another in before the holder is told
// (the package documentation, "Loss"); TestBeliefRestartBreaks shows the
// checker catching it.
func TestBelief(t *testing.T) {
	s := startServer(t)
	belief.Run(t, beliefConfig(t, s))
}

// TestBeliefRestartBreaks: memcached restarted under held leases loses
// them, another Client takes a key while its holder still believes, and
// the checker says so — the documented limit of a cache, and the proof
// that the checker can fail on a real backend.
func TestBeliefRestartBreaks(t *testing.T) {
	s := startServer(t)
	cfg := beliefConfig(t, s)
	cfg.Duration = 6 * time.Second
	cfg.TTLs = []time.Duration{1500 * time.Millisecond, 3 * time.Second} // renewals a second apart: a loss is found late
	cfg.FaultEvery = 1500 * time.Millisecond
	cfg.MinAcquired = 10
	cfg.Faults = []belief.Fault{{Name: "restart", Inject: func(int) (func(), error) {
		s.kill()
		return nil, s.start()
	}}}
	t.Logf("memcached forgets its leases when it restarts: the checker must find a violation")
	rep, err := belief.Check(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", rep)
	if rep.Faults["restart"] == 0 {
		t.Fatalf("no restart was made: %v", rep)
	}
	if len(rep.Violations) == 0 {
		t.Fatalf("memcached restarted %d times under held leases and the checker found nothing: %v", rep.Faults["restart"], rep)
	}
	t.Logf("found, as expected: %v", rep.Violations[0])
}
