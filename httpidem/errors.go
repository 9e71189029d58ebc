package httpidem

import (
	"errors"

	"github.com/latchkey/latchkey/core"
)

// Errors returned and reported by this package, matched with errors.Is.
// Every *Problem a guard answers wraps one of them, and store failures
// wrap the store's own error as well.
//
// The vocabulary is core's: contention (the key in flight, a claim already
// taken today, a parameter lock held) also matches core.ErrNotAcquired; a
// lease or lock lost while its handler ran also matches core.ErrLost; an
// outage is ErrUnavailable with the backend's error, never contention; bad
// input is ErrInvalid<What>.
var (
	// ErrKeyMissing: the route requires an Idempotency-Key and the request
	// has none (400).
	ErrKeyMissing = errors.New("httpidem: Idempotency-Key missing")

	// ErrInvalidKey: the Idempotency-Key header is not one sf-string or bare
	// token of 1 to MaxKeyLength bytes, or appears more than once (400).
	ErrInvalidKey = errors.New("httpidem: invalid Idempotency-Key")

	// ErrKeyReused: the key was used for a different request — another
	// method, path, query or body (422).
	ErrKeyReused = errors.New("httpidem: Idempotency-Key reused for a different request")

	// ErrInFlight: a request with this key is still being processed (409).
	// It matches core.ErrNotAcquired.
	ErrInFlight error = &coreKind{"httpidem: request with this Idempotency-Key in flight", core.ErrNotAcquired}

	// ErrBodyTooLarge: the request body is over MaxRequestBody (413).
	ErrBodyTooLarge = errors.New("httpidem: request body too large")

	// ErrInvalidRequest: the request could not be read, or the Object or
	// location extractor rejected it (400).
	ErrInvalidRequest = errors.New("httpidem: invalid request")

	// ErrInvalidParam: a locked route parameter is empty, too long, not
	// validly percent-encoded, or has braces or control characters once
	// decoded (400).
	ErrInvalidParam = errors.New("httpidem: invalid route parameter")

	// ErrUnauthenticated: the Principal or Subject extractor failed or
	// returned an empty string (401). Such a request is never put in a
	// shared bucket.
	ErrUnauthenticated = errors.New("httpidem: caller not identified")

	// ErrAlreadyClaimed: the subject already claimed this object today
	// (409). It matches core.ErrNotAcquired.
	ErrAlreadyClaimed error = &coreKind{"httpidem: already claimed today", core.ErrNotAcquired}

	// ErrLocked: a parameter lock is held by another request (and was not
	// released within WaitTimeout) (409). It matches core.ErrNotAcquired.
	ErrLocked error = &coreKind{"httpidem: resource locked", core.ErrNotAcquired}

	// ErrLimited: the key's limit of requests in flight is reached (and no
	// permit came free within WaitTimeout) (429). It matches
	// core.ErrNotAcquired.
	ErrLimited error = &coreKind{"httpidem: too many requests in flight", core.ErrNotAcquired}

	// ErrUnavailable: the store or lock backend failed (503 unless
	// FailOpen); the backend's own error is wrapped with it. Never
	// contention.
	ErrUnavailable = errors.New("httpidem: store unavailable")

	// ErrLost: the in-flight lease or parameter lock was lost while the
	// handler ran (the request context is cancelled with it as the cause),
	// so an Idempotency response was not stored. It matches core.ErrLost.
	ErrLost error = &coreKind{"httpidem: lease lost", core.ErrLost}

	// ErrNotStorable: a request that ran in a transaction (WithHandlerTx)
	// answered with a response that cannot be stored — over
	// MaxResponseBody, or the handler tried to hijack the connection — so
	// its transaction was rolled back (500).
	ErrNotStorable = errors.New("httpidem: response not storable")

	// ErrInvalidConfig: a config or store option that cannot work. The
	// middleware constructors panic with it; ToMiddleware and the New*
	// functions return it.
	ErrInvalidConfig = errors.New("httpidem: invalid config")

	// ErrInvalidArgument: a store call with an empty or over-long key,
	// scope or subject, or an invalid TTL.
	ErrInvalidArgument = errors.New("httpidem: invalid argument")
)

// coreKind is a sentinel of this package that also matches one of core's,
// with its own one-line text.
type coreKind struct {
	msg  string
	kind error
}

func (e *coreKind) Error() string { return e.msg }
func (e *coreKind) Unwrap() error { return e.kind }
