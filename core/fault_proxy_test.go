package core_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/faultnet"
)

// A faultProxy is a TCP proxy between clients and one Redis, on 127.0.0.1,
// that injects network faults: delays, a black hole, resets, a cut. It is
// internal/faultnet's Proxy (shared with the backends' belief tests) under
// the names these tests use; it is stopped when the test ends.
type faultProxy struct{ *faultnet.Proxy }

// The directions data flows through the proxy.
const (
	up   = faultnet.Up   // client to Redis
	down = faultnet.Down // Redis to client
)

// startProxy starts a proxy to upstream and returns it; Addr is where
// clients connect.
func startProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	return &faultProxy{faultnet.Start(t, upstream)}
}

// delay makes each chunk of direction dir wait latency ± jitter until the
// returned function is called.
func (fp *faultProxy) delay(dir faultnet.Dir, latency, jitter time.Duration) (remove func()) {
	return fp.Delay(dir, latency, jitter)
}

// blackhole drops the data of direction dir, keeping connections open,
// until the returned function is called.
func (fp *faultProxy) blackhole(dir faultnet.Dir) (remove func()) { return fp.Blackhole(dir) }

// resetAll resets every connection (TCP RST, "connection reset by peer"),
// and every new one, until the returned function is called.
func (fp *faultProxy) resetAll() (remove func()) { return fp.Reset() }

// cut closes every connection through the proxy and refuses new ones until
// the returned function listens again on the same address.
func (fp *faultProxy) cut() (restore func()) { return fp.Cut() }
