package etcdlock_test

import (
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
)

// The conformance suite; each subtest's Client has its own connection to
// etcd, as separate processes would.
func TestConformance(t *testing.T) {
	ep := startEtcd(t)
	locktest.Run(t, func(t *testing.T) *core.Client {
		return newClient(t, newCli(t, ep))
	})
}
