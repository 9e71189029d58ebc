//go:build race

package zklock_test

import "testing"

// TestBelief, under the race detector, only says why it does not run
// here. Its faults make sessions reconnect while a waiter's watch is set,
// and go-zookeeper v1.0.4 (the newest release) then reads Conn.lastZxid in
// sendSetWatches while the new connection's recvLoop writes it (conn.go
// lines 614 and 849; go-zookeeper/zk pull request 35, open since 2020).
// The race is inside the driver, not in zklock, and the detector fails
// the whole binary on it. `make ci` runs TestBelief in a build without
// -race (belief_test.go), and so does `make soak`.
func TestBelief(t *testing.T) {
	t.Skip("built with -race: go-zookeeper v1.0.4 races on its own lastZxid when a session reconnects with watches set; make ci runs TestBelief without -race")
}
