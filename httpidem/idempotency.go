package httpidem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// IdempotencyConfig configures the Idempotency middleware. Zero fields take
// their values from DefaultIdempotencyConfig; only Store is required.
type IdempotencyConfig struct {
	// Skipper returns true for requests the middleware passes through
	// untouched. nil: none (Methods still applies).
	Skipper func(r *http.Request) bool

	// Store keeps leases and records. Required: nil, or a nil *RedisStore,
	// *MemoryStore or *SQLStore, is ErrInvalidConfig. A SQLStore made
	// WithHandlerTx runs each request in a transaction that stores its
	// response (TxFromContext).
	Store IdempotencyStore

	// Principal returns who is calling — a user, tenant or API-key ID —
	// and scopes the keys by it: one principal's key never replays for
	// another. An error or an empty string answers 401. Consulted only for
	// requests that carry a key. nil: AuthorizationPrincipal, so a request
	// without an Authorization header gets 401 (its detail names this
	// setting).
	Principal func(r *http.Request) (string, error)

	// Require answers 400 to requests without an Idempotency-Key. false:
	// such requests pass through untouched.
	Require bool

	// Methods are the methods the middleware applies to; others pass
	// through. nil: POST and PATCH.
	Methods []string

	// MaxKeyLength is the longest key accepted, in bytes, at most 300.
	// 0: DefaultMaxKeyLength (255).
	MaxKeyLength int

	// LeaseTTL is the in-flight lease length. The lease is renewed every
	// LeaseTTL/3 while the handler runs, so it bounds how long a crashed
	// node blocks its keys, not how long a handler may run. 0: 30s.
	LeaseTTL time.Duration

	// RecordTTL is how long a completed response is kept and replayed;
	// afterwards the key runs as new. 0: 24h.
	RecordTTL time.Duration

	// WaitInFlight makes a request that finds its key in flight wait up to
	// this long for the first one to finish and then get its replay,
	// instead of an immediate 409. 0: answer 409 at once.
	WaitInFlight time.Duration

	// RetryAfter is the Retry-After of a 409 for a key in flight. 0: one
	// second. (The holder's lease says nothing useful here: renewal keeps
	// it between 2/3 and all of LeaseTTL however soon the handler ends.)
	RetryAfter time.Duration

	// MaxRequestBody is the largest body fingerprinted; a larger one is
	// 413. 0: 1 MiB.
	MaxRequestBody int64

	// MaxResponseBody is the largest response body stored; a larger
	// response is sent but not stored (a retry runs again). 0: 1 MiB.
	MaxResponseBody int64

	// StoreHeaders are the response headers stored and replayed. Set-Cookie,
	// Authorization, hop-by-hop headers, Content-Length and Date are never
	// stored; listing them is a config error. nil: DefaultStoreHeaders.
	StoreHeaders []string

	// StoreStatus decides whether a response with this status is stored
	// (and replayed later) or dropped (and run again on retry). nil:
	// DefaultStoreStatus (everything but 5xx and 429). Stripe stores 5xx
	// too: func(int) bool { return true }.
	StoreStatus func(status int) bool

	// Fingerprint identifies the request a key was used for; a key reused
	// with another fingerprint is 422. Results over 128 bytes or with
	// bytes outside visible ASCII are replaced by their SHA-256. nil:
	// DefaultFingerprint (method, path, query, body).
	Fingerprint func(r *http.Request, body []byte) string

	// FailOpen runs the handler unprotected when the store fails — then,
	// with a SQLStore made WithHandlerTx, without a transaction:
	// TxFromContext reports false. false: answer 503.
	FailOpen bool

	// ProblemWriter writes the middleware's error answers. nil:
	// WriteProblem (application/problem+json).
	ProblemWriter ProblemWriter

	// OnDecision, if set, is called with every decision (see Decision).
	OnDecision func(ctx context.Context, d Decision)

	// Observer, if set, traces and measures the decisions (see Observer;
	// package otel's Instrumentation is one). nil: none.
	Observer Observer

	// Scope names what the middleware protects ("orders", "payments") in
	// decisions (Decision.Scope) and telemetry: 1 to 64 bytes of
	// UTF-8 without control characters, a fixed name, never an ID. It does not partition
	// keys (Principal does). "": none.
	Scope string
}

// DefaultIdempotencyConfig holds the defaults of IdempotencyConfig.
var DefaultIdempotencyConfig = IdempotencyConfig{
	Principal:       AuthorizationPrincipal,
	Methods:         []string{http.MethodPost, http.MethodPatch},
	MaxKeyLength:    DefaultMaxKeyLength,
	LeaseTTL:        30 * time.Second,
	RecordTTL:       24 * time.Hour,
	RetryAfter:      time.Second,
	MaxRequestBody:  1 << 20,
	MaxResponseBody: 1 << 20,
	StoreHeaders:    DefaultStoreHeaders,
	StoreStatus:     DefaultStoreStatus,
	Fingerprint:     DefaultFingerprint,
}

// DefaultStoreStatus stores every response except 5xx and 429, which a
// client should be able to retry for real.
func DefaultStoreStatus(status int) bool {
	return status < 500 && status != http.StatusTooManyRequests
}

// AuthorizationPrincipal, the default Principal, identifies the caller by
// a hash of the Authorization header; a request without one gets 401.
// Prefer a Principal that returns the account or tenant ID your
// authentication established: a retry sent after a token refresh carries
// another Authorization header and would run again.
func AuthorizationPrincipal(r *http.Request) (string, error) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return "", fmt.Errorf("no Authorization header")
	}
	sum := sha256.Sum256([]byte(v))
	return "authz:" + hex.EncodeToString(sum[:16]), nil
}

// Idempotency returns net/http middleware enforcing Idempotency-Key per
// draft-ietf-httpapi-idempotency-key-header-07 (see the package doc). Like
// Echo's middleware constructors it panics, at start-up, if cfg is invalid
// (the message matches ErrInvalidConfig and says what is wrong); use
// cfg.ToMiddleware to get the error instead.
func Idempotency(cfg IdempotencyConfig) func(http.Handler) http.Handler {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware validates cfg and returns the middleware, or an error
// matching ErrInvalidConfig. It never panics.
func (cfg IdempotencyConfig) ToMiddleware() (func(http.Handler) http.Handler, error) {
	g, err := NewIdempotencyGuard(cfg)
	if err != nil {
		return nil, err
	}
	write := problemWriter(cfg.ProblemWriter)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serve(w, next, g.Begin(r, nil), write, nil)
		})
	}, nil
}
