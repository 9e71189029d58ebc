package grpcmw

import (
	"context"
	"crypto/rand"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryClientInterceptor returns a client interceptor that gives each
// logical call of methods (full method names; none: every unary method)
// an idempotency key of its own — 26 random characters from crypto/rand —
// in its idempotency-key metadata, unless the call already carries one
// (NewKeyContext). The key is made once per call of the interceptor, and
// everything the call does below it shares it.
//
// So the key must be made outside the retry loop: chain this interceptor
// before (outside) a retrying interceptor, such as go-grpc-middleware's
// retry.UnaryClientInterceptor, and every attempt of a call carries the
// same key — a retry whose first attempt did its work but lost the answer
// gets the stored result instead of doing the work again:
//
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(
//			grpcmw.UnaryClientInterceptor(), // first: one key per logical call
//			retry.UnaryClientInterceptor(),  // then: every attempt resends it
//		))
//
// In the other order, each attempt would be a call of its own with a key
// of its own, and the server would run them all. gRPC's own retries (a
// service config's retryPolicy) happen below every interceptor, so they
// keep the key too.
func UnaryClientInterceptor(methods ...string) grpc.UnaryClientInterceptor {
	methods = slices.Clone(methods)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if len(methods) > 0 && !slices.Contains(methods, method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(MetadataKey)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, rand.Text())
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// NewKeyContext returns ctx whose outgoing metadata carries key as the
// call's idempotency key, replacing any other. Use it to send a key the
// caller keeps itself — stored with a job, say, so that the job's retry
// after a crash reuses it; UnaryClientInterceptor keeps it.
func NewKeyContext(ctx context.Context, key string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(MetadataKey, key)
	return metadata.NewOutgoingContext(ctx, md)
}
