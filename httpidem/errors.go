package httpidem

import "errors"

// Errors returned and reported by this package. Every *Problem answered by
// a middleware wraps one of them (errors.Is(problem, ErrInFlight)), and
// store failures wrap the store's own error as well.
var (
	// ErrKeyMissing: the route requires an Idempotency-Key and the request
	// has none (400).
	ErrKeyMissing = errors.New("httpidem: Idempotency-Key missing")

	// ErrKeyInvalid: the Idempotency-Key header is not one sf-string or bare
	// token of 1 to MaxKeyLength bytes, or appears more than once (400).
	ErrKeyInvalid = errors.New("httpidem: invalid Idempotency-Key")

	// ErrKeyReused: the key was used for a different request — another
	// method, path, query or body (422).
	ErrKeyReused = errors.New("httpidem: Idempotency-Key reused for a different request")

	// ErrInFlight: a request with this key is still being processed (409).
	ErrInFlight = errors.New("httpidem: request with this Idempotency-Key in flight")

	// ErrBodyTooLarge: the request body is over MaxRequestBody (413).
	ErrBodyTooLarge = errors.New("httpidem: request body too large")

	// ErrBadRequest: the request could not be read, or the Object extractor
	// rejected it (400).
	ErrBadRequest = errors.New("httpidem: bad request")

	// ErrUnauthenticated: the Principal or Subject extractor failed or
	// returned an empty string (401). Such a request is never put in a
	// shared bucket.
	ErrUnauthenticated = errors.New("httpidem: caller not identified")

	// ErrAlreadyClaimed: the subject already claimed this object today (409).
	ErrAlreadyClaimed = errors.New("httpidem: already claimed today")

	// ErrStoreUnavailable: the store failed (503 unless FailOpen).
	ErrStoreUnavailable = errors.New("httpidem: store unavailable")

	// ErrLeaseLost: the in-flight lease was lost while the handler ran (the
	// request context is cancelled with it as the cause), so its response
	// was not stored.
	ErrLeaseLost = errors.New("httpidem: in-flight lease lost")

	// ErrInvalidConfig: a config or store option that cannot work.
	ErrInvalidConfig = errors.New("httpidem: invalid config")

	// ErrInvalidArgument: a store call with an empty or over-long key,
	// scope or subject, or an invalid TTL.
	ErrInvalidArgument = errors.New("httpidem: invalid argument")
)
