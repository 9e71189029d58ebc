package grpcmw_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stock is the test service: each method calls the func the test set.
type stock struct {
	testpb.UnimplementedStockServer
	deduct func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error)
	watch  func(req *testpb.WatchRequest, ss grpc.ServerStreamingServer[testpb.Level]) error
}

func (s *stock) Deduct(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
	return s.deduct(ctx, req)
}

func (s *stock) Watch(req *testpb.WatchRequest, ss grpc.ServerStreamingServer[testpb.Level]) error {
	return s.watch(req, ss)
}

// serve starts a gRPC server with svc and opts on an in-memory listener
// (bufconn), or on a loopback TCP port with tcp set, and returns a client
// of it made with copts; both stop in t.Cleanup.
func serve(t *testing.T, svc *stock, opts []grpc.ServerOption, copts ...grpc.DialOption) testpb.StockClient {
	t.Helper()
	return testpb.NewStockClient(serveConn(t, false, svc, opts, copts...))
}

func serveConn(t *testing.T, tcp bool, svc *stock, opts []grpc.ServerOption, copts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testpb.RegisterStockServer(srv, svc)
	var lis net.Listener
	target := "passthrough:///bufnet"
	copts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, copts...)
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, target = l, l.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 20)
		lis = bl
		copts = append(copts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(target, copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-served
	})
	return conn
}

// recovery is the outermost server interceptor of the tests: a panic
// becomes codes.Internal, as go-grpc-middleware's recovery does.
func recovery(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(ctx, req)
}

func streamRecovery(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(srv, ss)
}

// unary makes the server options of a chain of unary interceptors, behind
// recovery.
func unary(ics ...grpc.UnaryServerInterceptor) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{recovery}, ics...)...)}
}

// tenant is the principal of the tests: x-tenant metadata.
func tenant(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-tenant"); len(v) == 1 && v[0] != "" {
		return v[0], nil
	}
	return "", errors.New("no x-tenant")
}

// outgoing returns ctx with the pairs as outgoing metadata.
func outgoing(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// as returns a context for a call of tenant tn with idempotency key k
// ("": none), bounded by the test's deadline.
func as(t *testing.T, tn, k string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if tn != "" {
		ctx = outgoing(ctx, "x-tenant", tn)
	}
	if k != "" {
		ctx = outgoing(ctx, "idempotency-key", k)
	}
	return ctx
}

// testStore is what the tests need of a store.
type testStore interface {
	httpidem.IdempotencyStore
	Close() error
}

// backend is one place the tests keep their state: its store and lock
// client, and, for miniredis and Redis, a way to delete keys behind the
// library's back (a lost lease).
type backend struct {
	store testStore
	locks *core.Client
	// drop deletes the keys whose names contain part and satisfy keep
	// (nil: all); nil for the memory backend.
	drop func(t *testing.T, part string, match func(string) bool) int
}

// eachBackend runs f on memory, on miniredis and, when it answers (or
// LATCHKEY_REQUIRE_SERVERS=1), on the shared Redis, whose keys it
// removes afterwards.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("memory", func(t *testing.T) {
		s := must(httpidem.NewMemoryStore())
		locks := must(core.NewMemory())
		t.Cleanup(func() { s.Close(); locks.Close() })
		f(t, &backend{store: s, locks: locks})
	})
	t.Run("miniredis", func(t *testing.T) {
		mr, rdb := redistest.Miniredis(t, true)
		f(t, redisBackend(t, rdb, "test", mrDrop(mr)))
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t)
		p := redistest.Prefix(t, rdb) // deletes every key under it at the end
		f(t, redisBackend(t, rdb, p, redisDrop(rdb, p)))
	})
}

func redisBackend(t *testing.T, rdb redis.UniversalClient, prefix string, drop func(*testing.T, string, func(string) bool) int) *backend {
	s := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix+":idem")))
	locks := must(core.NewRedis(rdb, core.WithKeyPrefix(prefix+":locks")))
	t.Cleanup(func() { s.Close(); locks.Close() })
	return &backend{store: s, locks: locks, drop: drop}
}

func mrDrop(mr *miniredis.Miniredis) func(*testing.T, string, func(string) bool) int {
	return func(_ *testing.T, part string, match func(string) bool) int {
		n := 0
		for _, k := range mr.Keys() {
			if strings.Contains(k, part) && (match == nil || match(k)) {
				mr.Del(k)
				n++
			}
		}
		return n
	}
}

func redisDrop(rdb redis.UniversalClient, prefix string) func(*testing.T, string, func(string) bool) int {
	return func(t *testing.T, part string, match func(string) bool) int {
		ctx := context.Background()
		n := 0
		for iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator(); iter.Next(ctx); {
			if k := iter.Val(); strings.Contains(k, part) && (match == nil || match(k)) {
				if err := rdb.Del(ctx, k).Err(); err != nil {
					t.Error(err)
				}
				n++
			}
		}
		return n
	}
}

// must returns v, or panics with err: constructors in tests are given
// valid arguments, so an error is a bug in the test.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// decisions collects OnDecision reports.
type decisions struct {
	mu  sync.Mutex
	got []httpidem.Decision
}

func (d *decisions) record(_ context.Context, x httpidem.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, x)
}

func (d *decisions) outcomes() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var o []string
	for _, x := range d.got {
		o = append(o, string(x.Outcome))
	}
	return strings.Join(o, " ")
}

// isStatus checks err's code and this package's reason.
func isStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || grpcmw.Reason(err) != reason {
		t.Fatalf("got %v (reason %q), want %v with reason %q", err, grpcmw.Reason(err), code, reason)
	}
}

// waitFor polls cond every few milliseconds for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mdValue returns the first value of key in md, or "".
func mdValue(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
