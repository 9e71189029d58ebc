package belief_test

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest/belief"
)

// This example checks the in-memory backend for two seconds, without
// faults, and prints whether it kept its promise. A backend's own test
// passes Faults that cut or stall Client i's connection (see
// internal/faultnet in this repository) or restart its server, and calls
// belief.Run(t, cfg) instead, which fails the test.
func ExampleCheck() {
	cfg := belief.Config{
		Clients:     1, // NewMemory's leases live in its Client
		Duration:    2 * time.Second,
		Seed:        42,
		MinAcquired: 5,
		Open: func(i int, obs core.Observer) (*core.Client, error) {
			return core.NewMemory(core.WithObserver(obs))
		},
	}
	rep, err := belief.Check(context.Background(), cfg)
	if err != nil {
		fmt.Println("cannot run:", err)
		return
	}
	fmt.Println(rep.Err() == nil, len(rep.Violations))
	// Output: true 0
}
