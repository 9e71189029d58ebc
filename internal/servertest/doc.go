// Package servertest starts private etcd, ZooKeeper and memcached servers
// for integration tests: one process per call, on free loopback ports,
// with a data directory of its own, answering before the call returns.
//
// It starts them as the backends' own tests do (etcd with a 50 ms
// heartbeat and a 500 ms election timeout, ZooKeeper standalone with a
// 500 ms tick, memcached with one thread and 32 MB), for tests that need
// a server to run on and nothing more: a test that kills, restarts or
// clusters servers keeps its own start-up.
//
// A server whose program is missing skips the test, or fails it with
// LATCHKEY_REQUIRE_SERVERS=1 (redistest.Unavailable). Every process is
// SIGKILLed and reaped in t.Cleanup, and by the kernel if the test binary
// dies first (Linux); its directory is the test's TempDir. The package
// needs no client library of any of the three: it probes them with their
// own plain-text commands.
package servertest
