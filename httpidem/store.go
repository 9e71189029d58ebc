package httpidem

import (
	"context"
	"net/http"
	"time"
)

// An IdempotencyStore keeps the in-flight leases and completed responses
// of Idempotency, shared by the nodes of a service. RedisStore and
// MemoryStore implement it; a decorator (tracing, metrics) can wrap one,
// and package storetest checks any implementation. It must be safe for
// concurrent use.
type IdempotencyStore interface {
	// Begin starts a request under an idempotency key. It returns the
	// completed Record of the key, or a Lease when the caller is to run
	// the request, or the in-flight holder's details. Errors are store
	// failures (matching ErrUnavailable) or ErrInvalidArgument, never
	// contention.
	Begin(ctx context.Context, a BeginArgs) (Begun, error)
}

// A ClaimStore keeps the once-per-day claims of Daily and Gate. RedisStore
// and MemoryStore implement it; package storetest checks any
// implementation. It must be safe for concurrent use.
type ClaimStore interface {
	// Claim takes a.Subject's claim on a.Object for a.Day and reports
	// whether it was the first today. A store that is not a ClaimCounter
	// is only given a.Count == CountNone.
	Claim(ctx context.Context, a ClaimArgs) (first bool, err error)

	// Unclaim deletes the claim a describes if it still carries a.Token
	// (compare and delete); with CountExact it also uncounts it.
	Unclaim(ctx context.Context, a ClaimArgs) error
}

// A ClaimCounter is a ClaimStore that also counts: its Claim honours
// ClaimArgs.Count — with CountExact a first claim also increments the
// day's counter, atomically; with CountApprox the subject is added to the
// day's HyperLogLog and first is only its hint (no claim is kept) — and
// Count reads the counts. Daily's Count mode and Counted need one.
type ClaimCounter interface {
	ClaimStore

	// Count returns how many subjects claimed object in scope on day: the
	// exact counter where one is kept, else the HyperLogLog estimate, else 0.
	Count(ctx context.Context, scope, object string, day Day) (int64, error)
}

// BeginArgs are the arguments of IdempotencyStore.Begin.
type BeginArgs struct {
	Key         string        // scoped key (principal and client key), 1 to 900 bytes
	Fingerprint string        // the request's fingerprint, at most 128 bytes
	LeaseTTL    time.Duration // in-flight lease length, renewed while held (> 0)
	Wait        time.Duration // > 0: wait up to this long for an in-flight holder to finish
}

// Begun is the result of IdempotencyStore.Begin: exactly one of Record, Lease and
// InFlight is set.
type Begun struct {
	Record   *Record   // the key completed; compare Record.Fingerprint
	Lease    Lease     // the caller holds the key and must Complete or Release it
	InFlight *InFlight // another request holds the key
}

// InFlight describes the holder of a key.
type InFlight struct {
	Fingerprint string        // the holder's request fingerprint
	TTL         time.Duration // time left on its lease (< 0: unknown)
}

// A Lease is the right to run the request of one key. Its holder must end
// it with Complete or Release, on every path (panics included).
type Lease interface {
	// Lost is closed when the lease is lost while held (it expired or was
	// taken over despite renewal).
	Lost() <-chan struct{}
	// Err is nil while the lease is held, and matches ErrLost once it is
	// lost.
	Err() error
	// Complete stores rec for ttl and releases the lease. A lease that was
	// lost stores nothing; a record written by a later holder of the key is
	// never overwritten. The error matches ErrLost in both cases.
	Complete(ctx context.Context, rec *Record, ttl time.Duration) error
	// Release gives the key up without storing anything.
	Release(ctx context.Context) error
}

// A Record is a stored response.
type Record struct {
	Fingerprint string      // fingerprint of the request that produced it
	Status      int         // HTTP status
	Header      http.Header // allow-listed response headers
	Body        []byte      // response body
}

// CountMode says how ClaimStore.Claim counts.
type CountMode uint8

// The count modes.
const (
	CountNone   CountMode = iota // gate only: one set-if-absent
	CountExact                   // gate and an exact counter, in one script
	CountApprox                  // a HyperLogLog only (PFADD), no gate
)

// ClaimArgs are the arguments of ClaimStore.Claim and Unclaim.
type ClaimArgs struct {
	Scope    string    // what is limited: "vote", "checkin"; 1 to 64 bytes of UTF-8, no control characters
	Object   string    // what is claimed: an item ID, "" for none; at most 256 bytes
	Subject  string    // who claims: a user ID; 1 to 256 bytes
	Day      Day       // the local day claimed
	ExpireAt time.Time // when the claim and counter may go (the next local midnight plus grace)
	Token    string    // stored with the claim; Unclaim deletes only a claim with this token
	Count    CountMode // how to count: CountNone unless the store is a ClaimCounter
}
