package httpidem

import (
	"context"
	"net/http"
	"time"
)

// A Store keeps what the middlewares share between the nodes of a service:
// in-flight leases and completed responses for Idempotency, claims and
// counters for Daily. RedisStore and MemoryStore implement it; a decorator
// (tracing, metrics) can wrap one. All methods are safe for concurrent use.
type Store interface {
	// Begin starts a request under an idempotency key. It returns the
	// completed Record of the key, or a Lease when the caller is to run
	// the request, or the in-flight holder's details. Errors are store
	// failures (or ErrInvalidArgument), never contention.
	Begin(ctx context.Context, a BeginArgs) (Begun, error)

	// Claim takes a.Subject's claim on a.Object for a.Day and reports
	// whether it was the first today. With CountExact a first claim also
	// increments the day's counter, atomically; with CountApprox the
	// subject is added to the day's HyperLogLog and first is only PFADD's
	// hint (no claim is kept).
	Claim(ctx context.Context, a ClaimArgs) (first bool, err error)

	// Unclaim deletes the claim a describes if it still carries a.Token
	// (compare and delete), and decrements the counter with CountExact.
	Unclaim(ctx context.Context, a ClaimArgs) error

	// Count returns how many subjects claimed object in scope on day: the
	// exact counter where one is kept, else the HyperLogLog estimate, else 0.
	Count(ctx context.Context, scope, object string, day Day) (int64, error)
}

// BeginArgs are the arguments of Store.Begin.
type BeginArgs struct {
	Key         string        // scoped key (principal and client key), 1 to 900 bytes
	Fingerprint string        // the request's fingerprint, at most 128 bytes
	LeaseTTL    time.Duration // in-flight lease length, renewed while held (> 0)
	Wait        time.Duration // > 0: wait up to this long for an in-flight holder to finish
}

// Begun is the result of Store.Begin: exactly one of Record, Lease and
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
	// Err is nil while the lease is held, and matches ErrLeaseLost once
	// it is lost.
	Err() error
	// Complete stores rec for ttl and releases the lease. A lease that was
	// lost stores nothing; a record written by a later holder of the key is
	// never overwritten. The error matches ErrLeaseLost in both cases.
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

// CountMode says how Store.Claim counts.
type CountMode uint8

// The count modes.
const (
	CountNone   CountMode = iota // gate only: one SET NX EXAT
	CountExact                   // gate and an exact counter, in one script
	CountApprox                  // a HyperLogLog only (PFADD), no gate
)

// ClaimArgs are the arguments of Store.Claim and Store.Unclaim.
type ClaimArgs struct {
	Scope    string    // what is limited: "vote", "checkin"; 1 to 64 bytes of [A-Za-z0-9._-]
	Object   string    // what is claimed: an item ID, "" for none; at most 256 bytes
	Subject  string    // who claims: a user ID; 1 to 256 bytes
	Day      Day       // the local day claimed
	ExpireAt time.Time // when the claim and counter may go (the next local midnight plus grace)
	Token    string    // stored with the claim; Unclaim deletes only a claim with this token
	Count    CountMode // how to count
}
