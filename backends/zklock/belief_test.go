//go:build !race

// The race detector stays off for this test (belief_race_test.go says
// why); make ci runs it in a build of its own without -race.

package zklock_test

import (
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest/belief"
	"github.com/latchkey/latchkey/internal/faultnet"
	"github.com/latchkey/latchkey/internal/redistest"
)

// beliefSession is the session timeout of the belief run's Clients: a
// stall a little longer than it expires the session on the server.
const beliefSession = 1500 * time.Millisecond

// TestBelief runs the belief checker on a private ZooKeeper server (not
// the one the other tests share: it is restarted), each Client on a
// session of its own through a fault proxy of its own, while one Client
// at a time is stalled briefly, or long enough that its session expires
// on the server (its ephemeral nodes deleted, the keys free for others),
// and the server is restarted (SIGKILL, then started again on its data
// directory). Leases last at most two thirds of the session timeout: the
// TTLs are 300 ms, 600 ms and 1 s.
func TestBelief(t *testing.T) {
	if srvErr != nil { // no ZooKeeper here: the reason is the same
		redistest.Unavailable(t, "no ZooKeeper server could be started: %v", srvErr)
	}
	s, err := startServer()
	if err != nil {
		t.Fatalf("a private ZooKeeper server: %v", err)
	}
	t.Cleanup(func() {
		s.kill()
		os.RemoveAll(s.dir)
	})
	var proxies []*faultnet.Proxy
	for range 3 {
		proxies = append(proxies, faultnet.Start(t, s.addr))
	}
	conns := make([]*zk.Conn, len(proxies))
	sessions := make([]int64, len(proxies))
	cfg := belief.Config{
		Clients: len(proxies),
		TTLs:    []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second},
		Workers: 16,
		Keys:    []string{"k0", "k1", "k2", "k3", "k4", "k5"}, // faults are long: more keys, fewer waits
		Open: func(i int, obs core.Observer) (*core.Client, error) {
			conn := connect(t, proxies[i].Addr(), beliefSession) // closed when the test ends
			conns[i], sessions[i] = conn, conn.SessionID()
			return zklock.New(conn, zklock.WithSessionTimeout(beliefSession), zklock.WithRoot("/belief"),
				zklock.WithClientOptions(core.WithObserver(obs)))
		},
		FaultEvery: 800 * time.Millisecond, // quiet time: sessions come back between faults
		Faults: []belief.Fault{
			{Name: "stall", Min: 100 * time.Millisecond, Max: beliefSession, Weight: 2,
				Inject: func(i int) (func(), error) { return proxies[i].Stall(), nil }},
			{Name: "expire", Min: beliefSession + time.Second, Max: 2*beliefSession + time.Second, Weight: 1,
				Inject: func(i int) (func(), error) { return proxies[i].Stall(), nil }},
			{Name: "restart", Weight: 1,
				Inject: func(int) (func(), error) {
					s.kill()
					return nil, s.start()
				}},
		},
	}
	if os.Getenv(belief.DurationEnv) == "" {
		cfg.Duration = 12 * time.Second // the faults are long: every kind, and more
	}
	rep := belief.Run(t, cfg)
	// The sessions that expired were replaced by new ones once the stall
	// lifted: say how many, as evidence that "expire" did expire.
	replaced := 0
	for i, c := range conns {
		if c != nil && c.SessionID() != sessions[i] {
			replaced++
		}
	}
	t.Logf("sessions expired and replaced during the run: %d of %d (%d expire faults)", replaced, len(conns), rep.Faults["expire"])
}
