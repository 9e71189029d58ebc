package grpcmw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultMaxResultSize is the largest stored result, in bytes, when
// IdempotencyConfig.MaxResultSize is zero: gRPC's default limit on a
// received message.
const DefaultMaxResultSize = 4 << 20

// IdempotencyConfig configures NewIdempotency. Only Store is required; the
// fields shared with httpidem.IdempotencyConfig mean what they mean there,
// with the same defaults, unless their doc says otherwise.
type IdempotencyConfig struct {
	// Store keeps leases and results: httpidem.NewRedisStore or
	// httpidem.NewMemoryStore, shared by the servers of a service.
	// Required.
	Store httpidem.IdempotencyStore

	// Principal returns who is calling — a user, tenant or API-key ID
	// your authentication put in ctx — and scopes the keys by it: one
	// principal's key never replays for another. An error or "" answers
	// Unauthenticated (an error carrying a gRPC status answers that
	// status). Consulted only for calls that carry a key. nil:
	// AuthorizationPrincipal.
	Principal func(ctx context.Context) (string, error)

	// Require answers InvalidArgument (IDEMPOTENCY_KEY_MISSING) to calls
	// without a key. false: they run unprotected.
	Require bool

	// Methods are the full method names ("/shop.Orders/Create") the
	// interceptor applies to; other calls run untouched. nil: every unary
	// method.
	Methods []string

	MaxKeyLength int           // 0: 255 bytes
	LeaseTTL     time.Duration // 0: 30s, renewed every LeaseTTL/3 while the handler runs
	RecordTTL    time.Duration // how long a result is replayed; 0: 24h
	WaitInFlight time.Duration // a retry of a call in flight waits this long for its result; 0: Aborted at once
	RetryAfter   time.Duration // retry-after of that Aborted; 0: one second

	// MaxResultSize is the largest result stored, encoded, in bytes; a
	// larger one is answered but not stored (a retry runs again). 0:
	// DefaultMaxResultSize.
	MaxResultSize int64

	// StoreCode decides whether a result with this code is stored and
	// replayed, or dropped so that a retry runs again. nil:
	// DefaultStoreCode.
	StoreCode func(codes.Code) bool

	// FailOpen runs the handler unprotected when the store fails. false:
	// Unavailable (STORE_UNAVAILABLE).
	FailOpen bool

	// OnDecision, if set, is called with every decision (httpidem.Decision,
	// Kind httpidem.KindIdempotency).
	OnDecision func(ctx context.Context, d httpidem.Decision)

	// Observer, if set, traces and measures the decisions
	// (httpidem.Observer; package otel's Instrumentation is one). nil: none.
	Observer httpidem.Observer

	// Scope names what the interceptor protects ("orders") in decisions and
	// telemetry, as httpidem.IdempotencyConfig.Scope. "": none.
	Scope string
}

// DefaultStoreCode stores the results a retry would get again: OK,
// InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
// FailedPrecondition, OutOfRange and Unimplemented. The others — Canceled,
// DeadlineExceeded, Unavailable, ResourceExhausted, Aborted, Internal,
// Unknown, DataLoss and Unauthenticated — are not stored, so the retry
// runs again (httpidem's default, which drops 5xx and 429, in gRPC's
// terms).
func DefaultStoreCode(c codes.Code) bool {
	switch c {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

// AuthorizationPrincipal, the default Principal, identifies the caller by
// a hash of the call's authorization metadata; a call without it is
// answered Unauthenticated. Prefer a Principal that returns the account or
// tenant ID your authentication established: a retry sent after a token
// refresh carries another authorization and would run again.
func AuthorizationPrincipal(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get("authorization")
	if len(vs) == 0 {
		return "", errors.New("no authorization metadata (set IdempotencyConfig.Principal to identify callers another way)")
	}
	sum := sha256.Sum256([]byte(strings.Join(vs, "\n")))
	return "authz:" + hex.EncodeToString(sum[:16]), nil
}

// statusBase is added to a result's gRPC code to make the status of its
// stored record: 600 to 616, outside HTTP's statuses, so that the guard's
// store policy can read the code and no HTTP client mistakes the record
// for one of its own.
const statusBase = 600

// Idempotency makes unary calls that carry an idempotency key run once per
// key and principal: see the package doc. Make one with NewIdempotency; it
// is safe for concurrent use.
type Idempotency struct {
	g       *httpidem.IdempotencyGuard
	methods []string
	require bool
}

// NewIdempotency validates cfg, fills its zero fields and returns its
// interceptors' maker. The error matches httpidem.ErrInvalidConfig.
func NewIdempotency(cfg IdempotencyConfig) (*Idempotency, error) {
	for _, m := range cfg.Methods {
		if !validMethod(m) {
			return nil, fmt.Errorf("%w: Methods: %q is not a full method name (\"/package.Service/Method\")", httpidem.ErrInvalidConfig, m)
		}
	}
	if cfg.MaxResultSize < 0 {
		return nil, fmt.Errorf("%w: negative MaxResultSize", httpidem.ErrInvalidConfig)
	}
	if cfg.MaxResultSize == 0 {
		cfg.MaxResultSize = DefaultMaxResultSize
	}
	storeCode := cfg.StoreCode
	if storeCode == nil {
		storeCode = DefaultStoreCode
	}
	principal := cfg.Principal
	if principal == nil {
		principal = AuthorizationPrincipal
	}
	g, err := httpidem.NewIdempotencyGuard(httpidem.IdempotencyConfig{
		Store: cfg.Store, Require: cfg.Require, Methods: []string{http.MethodPost},
		Principal:    func(r *http.Request) (string, error) { return principal(r.Context()) },
		MaxKeyLength: cfg.MaxKeyLength, LeaseTTL: cfg.LeaseTTL, RecordTTL: cfg.RecordTTL,
		WaitInFlight: cfg.WaitInFlight, RetryAfter: cfg.RetryAfter,
		MaxRequestBody: sha256.Size, MaxResponseBody: cfg.MaxResultSize,
		StoreStatus: func(s int) bool {
			c := s - statusBase
			return c >= 0 && c <= int(codes.Unauthenticated) && storeCode(codes.Code(c))
		},
		Fingerprint: fingerprint, FailOpen: cfg.FailOpen,
		OnDecision: cfg.OnDecision, Observer: cfg.Observer, Scope: cfg.Scope,
	})
	if err != nil {
		return nil, err
	}
	return &Idempotency{g: g, methods: slices.Clone(cfg.Methods), require: cfg.Require}, nil
}

// validMethod reports whether m looks like a full method name.
func validMethod(m string) bool {
	svc, meth, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	return strings.HasPrefix(m, "/") && ok && svc != "" && meth != "" && !strings.Contains(meth, "/")
}

// fingerprint is the guard's fingerprint of a call: body is the SHA-256
// of the request's deterministic proto encoding, and the fingerprint the
// hex SHA-256 of "grpc", the full method name and that digest — never
// equal to an HTTP request's.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte("grpc\n"))
	h.Write([]byte(r.URL.Path))
	h.Write([]byte{'\n'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// digest is the SHA-256 of req's deterministic proto encoding.
func digest(req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcmw: request %T is not a proto.Message", req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("grpcmw: marshalling the request: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// UnaryServerInterceptor returns the interceptor. Calls of other Methods,
// and calls without a key when none is required, run untouched.
func (x *Idempotency) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if len(x.methods) > 0 && !slices.Contains(x.methods, info.FullMethod) {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		keys := md.Get(MetadataKey)
		if len(keys) == 0 && !x.require {
			return handler(ctx, req)
		}
		var body []byte
		if len(keys) > 0 {
			var err error
			if body, err = digest(req); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		header := http.Header{http.CanonicalHeaderKey(httpidem.HeaderKey): keys}
		call := x.g.Begin(newRequest(ctx, info.FullMethod, header, body), nil)
		switch call.Action() {
		case httpidem.ActionPass:
			return handler(ctx, req)
		case httpidem.ActionReplay:
			return replay(ctx, call)
		case httpidem.ActionRun:
			return x.run(ctx, info.FullMethod, call, req, handler)
		}
		return nil, answerUnary(ctx, call.Problem())
	}
}

// replay answers with the stored result of call, marked replayed.
func replay(ctx context.Context, call *httpidem.Call) (any, error) {
	var w recorder
	call.Replay(&w)
	res, err := decodeResult(w.body.Bytes())
	var resp any
	var callErr error
	if err == nil {
		resp, callErr, err = res.answer()
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpcmw: the stored result of this idempotency key cannot be replayed: %v", err)
	}
	header := metadata.Join(res.header, metadata.Pairs(MetadataReplayed, "true"))
	_ = grpc.SetHeader(ctx, header) // no stream (a direct call): no metadata
	if len(res.trailer) > 0 {
		_ = grpc.SetTrailer(ctx, res.trailer)
	}
	return resp, callErr
}

// run runs the handler under call's lease and stores its result. A
// handler that panics gives the lease back (Abort) and stores nothing.
func (x *Idempotency) run(ctx context.Context, method string, call *httpidem.Call, req any, handler grpc.UnaryHandler) (resp any, err error) {
	runCtx := call.Request().Context()
	c := &capture{inner: grpc.ServerTransportStreamFromContext(ctx), method: method}
	defer call.Abort() // after Finish a no-op
	resp, err = handler(grpc.NewContextWithServerTransportStream(runCtx, c), req)
	wasLost := lost(runCtx)

	var w recorder
	out := call.Writer(&w)
	code := statusOf(err).Code()
	out.WriteHeader(statusBase + int(code))
	header, trailer := c.metadata()
	if res, rerr := newResult(resp, err, header, trailer); rerr == nil {
		_, _ = out.Write(res.encode())
		call.Finish(0)
	} else {
		call.Abort() // not storable: give the key back
	}
	if err != nil && wasLost {
		return nil, lostStatus(nil)
	}
	return resp, err
}
