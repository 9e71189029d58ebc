// Package redistest is test support for integration tests that need real
// Redis servers.
//
// It offers three kinds of servers:
//
//   - the shared Redis of the machine or CI job ([Addr], [Client]): the one
//     at $REDIS_ADDR, or 127.0.0.1:6379;
//   - a private redis-server process owned by one test ([StartServer]), which
//     the test can kill, restart, pause and resume to simulate failures;
//   - a private Redis Cluster of n masters ([StartCluster]).
//
// When a server cannot be had (no Redis answers, redis-server is not on
// PATH), the test is skipped, or fails when LATCHKEY_REQUIRE_SERVERS=1 is
// set (see [Require] and [Unavailable]), so that CI cannot silently skip
// integration tests.
//
// Everything a test starts is stopped in t.Cleanup, even when the test
// fails: processes are killed with SIGKILL and reaped, clients are closed,
// and no goroutine of this package outlives the cleanup. Every wait is
// bounded, and the servers started here listen on 127.0.0.1 only.
package redistest
