// Package records gives the adapters of this module (cronlock and others)
// a small key-value store on the same backend as a core.Client — Redis,
// Redlock or memory — without widening core's public API. core installs
// Of when it is initialised.
package records

import (
	"context"
	"strconv"
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
	// ClaimWithin is Claim for a claim that serves one instant, planned
	// (a cron tick), and must be refused when it arrives too late. It
	// returns Taken when key already holds a claim; otherwise Late, and
	// stores nothing, when the store's clock has passed planned + window;
	// otherwise it stores value and returns Claimed. The clock is the
	// store's, never the caller's: Redis TIME inside the claim script (on
	// Redlock each node judges by its own TIME, and a claim needs a
	// majority of nodes, as Claim does), the local clock in memory.
	//
	// A claim lives for ttl (at least 1 ms) or until planned + window by
	// the store's clock, whichever ends later. So every claim of key that
	// arrives by planned + window finds an earlier one, and every claim
	// that arrives after it is refused: at most one claim of key ever
	// succeeds, however long a claim was delayed on the way — as long as
	// the store keeps its data and its clock does not go back. Planned
	// and window are taken to the millisecond; window must not be
	// negative.
	ClaimWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (Verdict, error)
	// SetIfNewer stores value under key for ttl (at least 1 ms), like Set,
	// unless key holds a record stored by SetIfNewer with a greater order
	// (a later tick's planned time, say); it reports whether it stored.
	// The comparison and the write are one atomic step. Equal orders
	// replace each other. A record stored by Set counts as older than any
	// order. Orders compare exactly within ±2^53. On Redlock each node
	// decides for itself and stored is true when a majority of nodes
	// stored.
	SetIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (stored bool, err error)
}

// A Verdict is the answer of Store.ClaimWithin.
type Verdict uint8

// The verdicts of Store.ClaimWithin.
const (
	// Claimed: the claim is stored and ours.
	Claimed Verdict = iota + 1
	// Taken: the key already held a claim (on Redlock: no majority
	// claimed, and more nodes held a claim than found it late).
	Taken
	// Late: the key held nothing but the claim arrived after planned +
	// window by the store's clock; nothing was stored.
	Late
)

// String returns "claimed", "taken", "late" or "Verdict(n)".
func (v Verdict) String() string {
	switch v {
	case Claimed:
		return "claimed"
	case Taken:
		return "taken"
	case Late:
		return "late"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Of returns the record store of a *core.Client (given as any to avoid an
// import cycle), or nil for anything else. Set by package core.
var Of func(client any) Store
