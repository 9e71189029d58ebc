// Package grpcmw guarantees for gRPC what package httpidem guarantees for
// net/http: a unary call retried under the same idempotency key gets the
// stored result instead of running its handler again, the calls that name
// the same key (one SKU, one order) run strictly one at a time across
// every server, and at most N calls of a key (a tenant) run at once. A call
// whose lease, lock or permit is lost has its context cancelled.
//
// The interceptors follow go-grpc-middleware's conventions: each is a
// grpc.UnaryServerInterceptor or grpc.StreamServerInterceptor made by a
// method named after its type, to be chained with grpc.ChainUnaryInterceptor
// and grpc.ChainStreamInterceptor. They are thin layers over httpidem's
// framework-neutral guards (httpidem.IdempotencyGuard, ParamLockGuard,
// LimitGuard), which decide every call as gRPC itself frames it — a POST to
// the full method name — so every decision, store call, lease and report is
// theirs, a fix lands once, and the stores are httpidem's
// (httpidem.NewRedisStore, httpidem.NewMemoryStore).
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(
//			recovery,                        // outermost: turns a panic into codes.Internal
//			idem.UnaryServerInterceptor(),   // a replay takes no permit and no lock
//			limit.UnaryServerInterceptor(),
//			lock.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(limit.StreamServerInterceptor(), lock.StreamServerInterceptor()))
//
// # Idempotency
//
// A unary call that carries idempotency-key metadata (MetadataKey) runs
// under an in-flight lease of its key, scoped by the caller's principal (a
// function of the context). Its result — the response message, or the
// status code, message and details of its error, plus the header and
// trailer metadata the handler set — is stored, and a retry with the same
// key gets it back with idempotent-replayed: true in its header metadata.
// The fingerprint of a call is its full method name and the deterministic
// proto encoding of its request: the same key sent with another request is
// codes.InvalidArgument, reason IDEMPOTENCY_KEY_REUSED. A retry that
// arrives while the first call still runs is codes.Aborted, reason
// REQUEST_IN_FLIGHT, with retry-after metadata (or it waits:
// IdempotencyConfig.WaitInFlight). Results whose code a retry could change
// (Unavailable, DeadlineExceeded, Canceled, ...: see DefaultStoreCode) are
// not stored, and a handler that panics gives its key back and stores
// nothing. Streams are not covered: they have no single request and
// result to fingerprint and replay. To record the metadata, a keyed call's
// handler gets a server transport stream of the interceptor's own, and
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors, which need
// grpc-go's, fail there: choose the compressor server-wide or on the
// client (grpc.UseCompressor) instead.
//
// UnaryClientInterceptor is the client side: it attaches a fresh key to
// each logical call and keeps it across retries, when it is chained before
// (outside) the retry interceptor.
//
// # Lock and Limit
//
// Lock runs the calls whose LockConfig.Key returns the same key one at a
// time; a busy key answers codes.Aborted, reason RESOURCE_LOCKED, with
// retry-after metadata, or the call waits up to LockConfig.WaitTimeout.
// Aborted, not ResourceExhausted: the call lost a race for one resource
// to another call, and gRPC's guidance for such concurrency conflicts is
// Aborted ("retry at a higher level"); ResourceExhausted means a quota,
// which is what Limit answers when a key has its LimitConfig.Limit calls
// in flight (reason LIMIT_REACHED). The handler's context carries the lock
// (core.FenceFromContext gives its fence for fenced writes) and is
// cancelled, with a cause matching core.ErrLost, if the lease is lost; a
// handler that then fails is answered codes.Aborted, reason LOCK_LOST.
//
// # Errors
//
// Every answer of an interceptor itself is a status with an
// errdetails.ErrorInfo in ErrorDomain whose reason is stable (the Reason*
// constants; Reason reads it), plus an errdetails.RetryInfo where a retry
// should wait (RetryDelay reads it). A Principal or Key function that
// returns an error carrying a gRPC status (status.Error) has that status
// answered as it is. Configuration mistakes are errors of the New
// functions matching httpidem.ErrInvalidConfig, never a failure per call.
//
// # Observing
//
// OnDecision and Observer mean what they mean in httpidem: package otel's
// Instrumentation, as Observer, makes each decision a span —
// latchkey.idempotency, latchkey.paramlock (Lock) and latchkey.limit — that
// is a child of the call's server span and the parent of the store's, the
// lock's and the handler's spans, and counts idempotency decisions in
// latchkey.idempotency.requests. Decision.Status is the HTTP status of
// httpidem's equivalent answer (409 for Aborted in flight, ...).
package grpcmw
