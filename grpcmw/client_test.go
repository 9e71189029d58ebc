package grpcmw_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// retrying is a client interceptor that retries a call answered
// Unavailable, up to attempts times in all: go-grpc-middleware's retry
// in short.
func retrying(attempts int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var err error
		for range attempts {
			if err = invoker(ctx, method, req, reply, cc, opts...); status.Code(err) != codes.Unavailable {
				return err
			}
		}
		return err
	}
}

// keyLog is a Deduct that records the idempotency key of every attempt
// and answers Unavailable to the first failures attempts of each key.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) service(failures int) *stock {
	return &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		key := ""
		if v := md.Get(grpcmw.MetadataKey); len(v) == 1 {
			key = v[0]
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.keys = append(l.keys, key)
		seen := 0
		for _, k := range l.keys {
			if k == key {
				seen++
			}
		}
		if seen <= failures {
			return nil, status.Error(codes.Unavailable, "try again")
		}
		return &testpb.DeductReply{}, nil
	}}
}

func (l *keyLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.keys)
}

func TestClientKeyIsKeptAcrossRetries(t *testing.T) {
	var log keyLog
	client := serve(t, log.service(2), nil,
		grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(), retrying(3)))
	for range 2 {
		if _, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	keys := log.all()
	if len(keys) != 6 || len(keys[0]) != 26 || keys[0] == keys[3] ||
		keys[1] != keys[0] || keys[2] != keys[0] || keys[4] != keys[3] || keys[5] != keys[3] {
		t.Fatalf("keys %q: want one fresh key per logical call, the same on its three attempts", keys)
	}
}

// TestClientKeyInsideTheRetryLoop shows why the order matters: chained
// after (inside) the retrying interceptor, each attempt is a call of its
// own with a key of its own.
func TestClientKeyInsideTheRetryLoop(t *testing.T) {
	var log keyLog
	client := serve(t, log.service(2), nil,
		grpc.WithChainUnaryInterceptor(retrying(3), grpcmw.UnaryClientInterceptor()))
	if _, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v; each attempt's new key failed twice, so all three fail", err)
	}
	if keys := log.all(); len(keys) != 3 || keys[0] == keys[1] || keys[1] == keys[2] {
		t.Fatalf("keys %q, want three different ones", keys)
	}
}

// TestClientKeyWithGRPCRetries: gRPC's own retries (a service config's
// retryPolicy) happen below the interceptors, with the same key.
func TestClientKeyWithGRPCRetries(t *testing.T) {
	var log keyLog
	const config = `{"methodConfig": [{"name": [{"service": "latchkey.grpcmw.test.Stock"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	client := serve(t, log.service(2), nil,
		grpc.WithDefaultServiceConfig(config), grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor()))
	if _, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{}); err != nil {
		t.Fatal(err)
	}
	if keys := log.all(); len(keys) != 3 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("keys %q, want one key on three attempts", keys)
	}
}

func TestClientKeyFromCallerAndMethods(t *testing.T) {
	var log keyLog
	client := serve(t, log.service(0), nil, grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor()))
	if _, err := client.Deduct(grpcmw.NewKeyContext(as(t, "", "old"), "job-42"), &testpb.DeductRequest{}); err != nil {
		t.Fatal(err)
	}
	other := serve(t, log.service(0), nil, grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor("/shop.Orders/Create")))
	if _, err := other.Deduct(as(t, "", ""), &testpb.DeductRequest{}); err != nil {
		t.Fatal(err)
	}
	if keys := log.all(); !slices.Equal(keys, []string{"job-42", ""}) {
		t.Fatalf("keys %q: want the caller's key kept, and no key for a method not listed", keys)
	}
}

// TestClientRetryGetsTheStoredResult is the point of it all: the first
// attempt runs and its result is stored, but its answer is lost on the way
// back (an Unavailable in its place); the retry carries the same key and
// gets the stored result, and the handler ran once.
func TestClientRetryGetsTheStoredResult(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	var runs, attempts atomic.Int64
	x := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: tenant, Require: true}))
	loseFirstAnswer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if attempts.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	}
	var hdr metadata.MD
	conn := serveConn(t, true, counting(&runs), []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recovery, loseFirstAnswer, x.UnaryServerInterceptor()),
	}, grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(), retrying(3)))
	r, err := testpb.NewStockClient(conn).Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "sku-1", Qty: 1}, grpc.Header(&hdr))
	if err != nil || r.GetRun() != 1 || runs.Load() != 1 || attempts.Load() != 2 {
		t.Fatalf("%v %v; runs %d, attempts %d: want one run, answered on the second attempt", r, err, runs.Load(), attempts.Load())
	}
	if mdValue(hdr, grpcmw.MetadataReplayed) != "true" {
		t.Errorf("header %v, want the replay marked", hdr)
	}
}
