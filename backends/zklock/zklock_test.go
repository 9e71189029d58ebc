package zklock_test

import (
	"testing"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
)

// The conformance suite: each subtest's Client has a session of its own.
func TestConformance(t *testing.T) {
	server(t)
	locktest.Run(t, func(t *testing.T) *core.Client { return newClient(t) })
}
