package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/servertest"
)

// zkSessionTimeout is the session timeout of the zklock Clients: their
// leases may last two thirds of it (the default TTL, 30 s, is lowered to
// 20 s), far more than the scenarios' TTLs.
const zkSessionTimeout = 30 * time.Second

// newZooKeeper is a lock store of zklock on a private standalone
// ZooKeeper, started for the test and killed when it ends: every Client
// gets a session of its own, as a process would.
func newZooKeeper(t *testing.T) lockStore {
	t.Helper()
	addr := servertest.StartZooKeeper(t)
	const root = "/latchkey-temporal"
	connect := func(t *testing.T) *zk.Conn {
		t.Helper()
		conn, _, err := zk.Connect([]string{addr}, zkSessionTimeout, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close) // after the Client's Close, registered later
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for conn.State() != zk.StateHasSession {
			select {
			case <-ctx.Done():
				t.Fatalf("no session with %s within 10s (state %v)", addr, conn.State())
			case <-time.After(5 * time.Millisecond):
			}
		}
		return conn
	}
	admin := connect(t)
	return lockStore{name: "zookeeper",
		client: func(t *testing.T) *core.Client {
			c := mustNew(zklock.New(connect(t), zklock.WithSessionTimeout(zkSessionTimeout), zklock.WithRoot(root)))
			t.Cleanup(func() { c.Close() })
			return c
		},
		steal: func(t *testing.T, lockKey string) {
			// The holder is the one child of the key's znode (zklock's doc:
			// "How it works"); deleting it ends the holder's lease at its
			// next renewal, which finds the node gone.
			dir := zkLockPath(root, core.DefaultKeyPrefix+":{"+lockKey+"}")
			nodes, _, err := admin.Children(dir)
			if err != nil || len(nodes) != 1 {
				t.Fatalf("steal %q: children %q (%v), want the holder's alone", dir, nodes, err)
			}
			if err := admin.Delete(dir+"/"+nodes[0], -1); err != nil {
				t.Fatalf("steal %q: %v", dir+"/"+nodes[0], err)
			}
		},
	}
}

// zkLockPath is the znode of a lease name under root, as zklock names it:
// the name with '%', '/', a leading '.' and every byte outside printable
// ASCII escaped as %XX.
func zkLockPath(root, name string) string {
	var sb strings.Builder
	sb.WriteString(root + "/")
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || c == '/' || c == '%' || (i == 0 && c == '.') {
			fmt.Fprintf(&sb, "%%%02X", c)
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// zkQuiet drops the ZooKeeper client library's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}
