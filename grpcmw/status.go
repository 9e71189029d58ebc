package grpcmw

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Metadata keys, lower case as gRPC sends them.
const (
	// MetadataKey carries a call's idempotency key: 1 to
	// IdempotencyConfig.MaxKeyLength bytes of visible ASCII, once.
	MetadataKey = "idempotency-key"
	// MetadataReplayed is set to "true" in the header metadata of a
	// replayed result.
	MetadataReplayed = "idempotent-replayed"
	// MetadataRetryAfter is set, in header metadata, to the whole seconds
	// a call answered Aborted or ResourceExhausted should wait before it
	// is retried (as HTTP's Retry-After).
	MetadataRetryAfter = "retry-after"
)

// ErrorDomain is the domain of the errdetails.ErrorInfo of every answer an
// interceptor of this package gives itself.
const ErrorDomain = "latchkey.grpcmw"

// The reasons of those answers (errdetails.ErrorInfo.Reason). They never
// change meaning; clients may switch on them (see Reason). Each is the
// upper-case form of httpidem's Code of the same answer.
const (
	ReasonKeyMissing      = "IDEMPOTENCY_KEY_MISSING" // InvalidArgument: IdempotencyConfig.Require and no key
	ReasonInvalidKey      = "IDEMPOTENCY_KEY_INVALID" // InvalidArgument: the key is empty, too long, not visible ASCII or repeated
	ReasonKeyReused       = "IDEMPOTENCY_KEY_REUSED"  // InvalidArgument: the key was used for another request
	ReasonInFlight        = "REQUEST_IN_FLIGHT"       // Aborted: the key's first call still runs
	ReasonInvalidRequest  = "REQUEST_INVALID"         // InvalidArgument: a lock or limit key that is not valid
	ReasonUnauthenticated = "UNAUTHENTICATED"         // Unauthenticated: the Principal (or Limit's Key) failed
	ReasonLocked          = "RESOURCE_LOCKED"         // Aborted: Lock's key is held by another call
	ReasonLimited         = "LIMIT_REACHED"           // ResourceExhausted: Limit's key has Limit calls in flight
	ReasonLockLost        = "LOCK_LOST"               // Aborted: the lock, permit or lease was lost while the handler ran
	ReasonUnavailable     = "STORE_UNAVAILABLE"       // Unavailable: the store or lock backend failed
)

// codeOf is the gRPC code of a guard's answer.
func codeOf(p *httpidem.Problem) codes.Code {
	switch p.Code {
	case httpidem.CodeInFlight, httpidem.CodeLocked, httpidem.CodeLockLost:
		return codes.Aborted
	case httpidem.CodeLimited:
		return codes.ResourceExhausted
	case httpidem.CodeUnauthenticated:
		return codes.Unauthenticated
	case httpidem.CodeUnavailable:
		return codes.Unavailable
	case httpidem.CodeKeyMissing, httpidem.CodeInvalidKey, httpidem.CodeKeyReused,
		httpidem.CodeInvalidRequest, httpidem.CodeBodyTooLarge:
		return codes.InvalidArgument
	}
	if p.Status >= 500 {
		return codes.Internal
	}
	return codes.Unknown
}

// grpcStatus returns the status in err's chain: one a Principal or Key
// function returned, kept as it is.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if st := se.GRPCStatus(); st != nil && st.Code() != codes.OK {
			return st, true
		}
	}
	return nil, false
}

// problemStatus is the status of a guard's answer: its code, its detail as
// the message, an ErrorInfo with its reason and, when a retry should wait,
// a RetryInfo.
func problemStatus(p *httpidem.Problem) *status.Status {
	if st, ok := grpcStatus(p.Err); ok {
		return st
	}
	return newStatus(codeOf(p), p.Detail, strings.ToUpper(p.Code), p.RetryAfter)
}

// newStatus makes a status of this package with its details.
func newStatus(c codes.Code, msg, reason string, retry time.Duration) *status.Status {
	st := status.New(c, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	var err error
	if retry > 0 {
		st, err = st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil { // only for a status of code OK
		return status.New(c, msg)
	}
	return st
}

// retryAfterMD is the retry-after metadata of p, or nil.
func retryAfterMD(p *httpidem.Problem) metadata.MD {
	if p.RetryAfter <= 0 {
		return nil
	}
	secs := int64((p.RetryAfter + time.Second - 1) / time.Second)
	return metadata.Pairs(MetadataRetryAfter, strconv.FormatInt(secs, 10))
}

// answerUnary is the error of a unary call answered with p; its
// retry-after metadata goes out as header metadata. A call whose context
// ended while it waited (for a lock, a permit or a result in flight) is
// answered with its context's status, Canceled or DeadlineExceeded, as
// gRPC answers it: the caller is gone or out of time, and must not read
// a busy answer as the reason.
func answerUnary(ctx context.Context, p *httpidem.Problem) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if md := retryAfterMD(p); md != nil {
		_ = grpc.SetHeader(ctx, md) // no stream (a direct call): no header
	}
	return problemStatus(p).Err()
}

// answerStream is the error of a stream answered with p.
func answerStream(ss grpc.ServerStream, p *httpidem.Problem) error {
	if err := ss.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if md := retryAfterMD(p); md != nil {
		_ = ss.SetHeader(md)
	}
	return problemStatus(p).Err()
}

// Reason returns the reason of err's errdetails.ErrorInfo in ErrorDomain
// (one of the Reason* constants) when err is an answer of an interceptor
// of this package, and "" otherwise.
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// RetryDelay returns the delay of err's errdetails.RetryInfo: how long to
// wait before retrying a call answered Aborted or ResourceExhausted. ok is
// false when err carries none.
func RetryDelay(err error) (d time.Duration, ok bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, x := range st.Details() {
		if ri, ok := x.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
