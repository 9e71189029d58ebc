package integration_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, except those of the in-process
// Temporal server: temporaltest's Stop leaves the server's own SDK workers
// (its system task queues), membership timers, metrics reporters, HTTP
// listeners, gRPC connections and SQLite store running. Their SDK worker goroutines look
// like any worker's, so a worker of these tests left running would not be
// caught here; the tests stop theirs in t.Cleanup (worker.Stop is
// synchronous). Goroutines of latchkey (watchdogs, notifiers, the lock-loss
// watcher of an activity) are still checked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.temporal.io/sdk/internal.(*baseWorker).runPoller"),
		goleak.IgnoreAnyFunction("go.temporal.io/sdk/internal.(*baseWorker).runTaskDispatcher"),
		goleak.IgnoreAnyFunction("go.temporal.io/sdk/internal.(*baseWorker).runEagerTaskDispatcher"),
		goleak.IgnoreAnyFunction("go.temporal.io/sdk/internal.(*baseWorker).Start.func2"),
		goleak.IgnoreAnyFunction("go.temporal.io/sdk/internal.(*sharedNamespaceWorker).run"),
		goleak.IgnoreAnyFunction("go.temporal.io/sdk/internal.(*localActivityTunnel).getTask"),
		goleak.IgnoreAnyFunction("github.com/temporalio/ringpop-go.(*Ringpop).startTimers.func1"),
		goleak.IgnoreAnyFunction("github.com/temporalio/ringpop-go.(*Ringpop).startTimers.func2"),
		goleak.IgnoreAnyFunction("go.temporal.io/server/common/membership/ringpop.(*monitor).startHeartbeatUpsertLoop.func1"),
		goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
		goleak.IgnoreAnyFunction("github.com/uber-go/tally/v4.(*scope).reportLoop"),
		goleak.IgnoreAnyFunction("net/http.(*Server).Serve"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"), // its SQLite store
	)
}
