package httpidem

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// Stable values of the "code" member of problem answers. Clients may
// switch on them; they never change meaning.
const (
	CodeKeyMissing      = "idempotency_key_missing" // 400, ErrKeyMissing
	CodeInvalidKey      = "idempotency_key_invalid" // 400, ErrInvalidKey
	CodeKeyReused       = "idempotency_key_reused"  // 422, ErrKeyReused
	CodeInFlight        = "request_in_flight"       // 409, ErrInFlight
	CodeBodyTooLarge    = "request_too_large"       // 413, ErrBodyTooLarge
	CodeInvalidRequest  = "request_invalid"         // 400, ErrInvalidRequest or ErrInvalidParam
	CodeUnauthenticated = "unauthenticated"         // 401, ErrUnauthenticated
	CodeAlreadyClaimed  = "already_claimed"         // 409, ErrAlreadyClaimed
	CodeLocked          = "resource_locked"         // 409, ErrLocked
	CodeLimited         = "limit_reached"           // 429, ErrLimited
	CodeLockLost        = "lock_lost"               // 503, ErrLost (ParamLock, Limit; Idempotency in a transaction)
	CodeUnavailable     = "store_unavailable"       // 503, ErrUnavailable
	CodeNotStorable     = "response_not_storable"   // 500, ErrNotStorable (Idempotency in a transaction)
)

// A ProblemWriter writes a guard's error answer. WriteProblem is the
// default.
type ProblemWriter func(w http.ResponseWriter, r *http.Request, p *Problem)

// problemWriter returns write, or WriteProblem when it is nil.
func problemWriter(write ProblemWriter) ProblemWriter {
	if write != nil {
		return write
	}
	return func(w http.ResponseWriter, _ *http.Request, p *Problem) { WriteProblem(w, p) }
}

// A Problem is an error answer: its status, stable code, a human-readable
// detail, an optional Retry-After and the error behind it. It is an error
// itself, and errors.Is sees through it to Err (one of this package's
// sentinels, with its cause).
type Problem struct {
	Status     int           // HTTP status
	Code       string        // stable machine-readable code (Code* constants)
	Detail     string        // human-readable explanation; never echoes secrets
	RetryAfter time.Duration // > 0: sent as Retry-After, rounded up to whole seconds
	Err        error         // the sentinel and cause; not sent
}

// Error returns the detail, or the status text.
func (p *Problem) Error() string {
	if p.Err != nil {
		return p.Err.Error()
	}
	if p.Detail != "" {
		return p.Detail
	}
	return http.StatusText(p.Status)
}

// Unwrap returns Err.
func (p *Problem) Unwrap() error { return p.Err }

// ProblemOf returns the *Problem in err's chain, if any.
func ProblemOf(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

// problemBody is the RFC 9457 document. "type" is about:blank, so "title"
// is the status text; "code" is the stable extension member.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// MarshalJSON encodes p as an RFC 9457 problem document.
func (p *Problem) MarshalJSON() ([]byte, error) {
	return json.Marshal(problemBody{
		Type: "about:blank", Title: http.StatusText(p.Status), Status: p.Status,
		Detail: p.Detail, Code: p.Code,
	})
}

// WriteProblem answers with p as application/problem+json, with
// Cache-Control: no-store and, when p.RetryAfter > 0, Retry-After. It is
// the default ProblemWriter.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	body, err := p.MarshalJSON()
	if err != nil { // cannot happen with these field types
		body = []byte(`{"type":"about:blank"}`)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retrySeconds(p.RetryAfter), 10))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// retrySeconds rounds d up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

func newProblem(status int, code, detail string, err error) *Problem {
	return &Problem{Status: status, Code: code, Detail: detail, Err: err}
}
