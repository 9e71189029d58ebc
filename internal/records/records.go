// Package records gives the adapters of this module (cronlock and others)
// a small key-value store on the same backend as a core.Client — Redis,
// Redlock or memory — without widening core's public API. core installs
// Of when it is initialised.
package records

import (
	"context"
	"time"
)

// Store keeps short records beside the locks, under the Client's key
// prefix ("<prefix>:{<key>}:rec" on Redis).
type Store interface {
	// Set stores value under key for ttl (which must be at least 1 ms).
	Set(ctx context.Context, key, value string, ttl time.Duration) error
	// Get returns the value under key; ok is false when there is none.
	Get(ctx context.Context, key string) (value string, ok bool, err error)
	// Claim stores value under key for ttl only if key holds nothing, and
	// reports whether it did: a one-shot claim (a cron tick) that is never
	// released, expires by itself, and carries no fence. On Redlock a claim
	// needs a majority of nodes.
	Claim(ctx context.Context, key, value string, ttl time.Duration) (bool, error)
}

// Of returns the record store of a *core.Client (given as any to avoid an
// import cycle), or nil for anything else. Set by package core.
var Of func(client any) Store
