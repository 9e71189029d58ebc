package grpcmw_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// idem serves svc behind recovery and the Idempotency of cfg, whose Store
// (nil: b's) and Principal (nil: tenant) are filled in.
func idem(t *testing.T, b *backend, cfg grpcmw.IdempotencyConfig, svc *stock) testpb.StockClient {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = b.store
	}
	if cfg.Principal == nil {
		cfg.Principal = tenant
	}
	x, err := grpcmw.NewIdempotency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, svc, unary(x.UnaryServerInterceptor()))
}

// counting is a Deduct that numbers its runs: the reply's Run, header
// metadata x-run and trailer x-trailer.
func counting(runs *atomic.Int64) *stock {
	return &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		n := runs.Add(1)
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-run", strconv.FormatInt(n, 10)))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"+strconv.FormatInt(n, 10)))
		return &testpb.DeductReply{Sku: req.GetSku(), Left: 100 - req.GetQty(), Run: n}, nil
	}}
}

// labels returns a map of n labels: enough entries that two encodings
// without deterministic marshalling would rarely agree.
func labels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("label-%02d", i)] = strconv.Itoa(i * 7)
	}
	return m
}

func TestIdempotencyReplaysTheResult(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		var decided decisions
		client := idem(t, b, grpcmw.IdempotencyConfig{OnDecision: decided.record}, counting(&runs))
		req := &testpb.DeductRequest{Sku: "sku-1", Qty: 3, Labels: labels(20)}

		var h1, t1, h2, t2 metadata.MD
		first, err := client.Deduct(as(t, "A", "k1"), req, grpc.Header(&h1), grpc.Trailer(&t1))
		if err != nil {
			t.Fatal(err)
		}
		// The same request, its map encoded in another order by the client.
		again, err := client.Deduct(as(t, "A", "k1"), &testpb.DeductRequest{Sku: "sku-1", Qty: 3, Labels: labels(20)},
			grpc.Header(&h2), grpc.Trailer(&t2))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(first, again) || first.GetRun() != 1 || first.GetLeft() != 97 || runs.Load() != 1 {
			t.Fatalf("first %v, again %v, runs %d; want the first result twice from one run", first, again, runs.Load())
		}
		if got := h1.Get(grpcmw.MetadataReplayed); len(got) != 0 {
			t.Errorf("first call marked replayed: %v", h1)
		}
		if got := h2.Get(grpcmw.MetadataReplayed); len(got) != 1 || got[0] != "true" {
			t.Errorf("replay header %v, want %s: true", h2, grpcmw.MetadataReplayed)
		}
		if mdValue(h2, "x-run") != "1" || mdValue(t2, "x-trailer") != "t1" || mdValue(t1, "x-trailer") != "t1" {
			t.Errorf("replay header %v trailer %v; want the first call's x-run: 1 and x-trailer: t1", h2, t2)
		}

		// Keys are scoped by the principal: tenant B's k1 runs.
		other, err := client.Deduct(as(t, "B", "k1"), req)
		if err != nil || other.GetRun() != 2 {
			t.Fatalf("tenant B: %v %v, want a run of its own", other, err)
		}
		if got := decided.outcomes(); got != "first replayed first" {
			t.Errorf("decisions %q", got)
		}
	})
}

func TestIdempotencyReplaysErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		client := idem(t, b, grpcmw.IdempotencyConfig{}, &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
			n := runs.Add(1)
			if req.GetSku() == "flaky" && n == 1 {
				return nil, status.Error(codes.Unavailable, "database down") // not stored: the retry runs
			}
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-run", strconv.FormatInt(n, 10)))
			if req.GetSku() == "flaky" {
				return &testpb.DeductReply{Run: n}, nil
			}
			st, _ := status.New(codes.FailedPrecondition, "out of stock").WithDetails(&errdetails.PreconditionFailure{
				Violations: []*errdetails.PreconditionFailure_Violation{{Type: "STOCK", Subject: req.GetSku(), Description: "0 left"}},
			})
			return nil, st.Err()
		}})

		var results []*status.Status
		for range 2 {
			var tr metadata.MD
			_, err := client.Deduct(as(t, "A", "k-err"), &testpb.DeductRequest{Sku: "sku-9", Qty: 1}, grpc.Trailer(&tr))
			if mdValue(tr, "x-run") != "1" {
				t.Errorf("trailer %v, want the first run's", tr)
			}
			results = append(results, status.Convert(err))
		}
		if runs.Load() != 1 || !proto.Equal(results[0].Proto(), results[1].Proto()) || results[1].Code() != codes.FailedPrecondition {
			t.Fatalf("runs %d; errors %v and %v, want one run and its status twice", runs.Load(), results[0].Proto(), results[1].Proto())
		}
		if d := results[1].Details(); len(d) != 1 || d[0].(*errdetails.PreconditionFailure).GetViolations()[0].GetSubject() != "sku-9" {
			t.Errorf("replayed details %v", d)
		}

		runs.Store(0)
		_, err := client.Deduct(as(t, "A", "k-flaky"), &testpb.DeductRequest{Sku: "flaky"})
		isStatus(t, err, codes.Unavailable, "")
		for want := int64(2); want <= 3; want++ { // the retry runs; the one after it replays
			r, err := client.Deduct(as(t, "A", "k-flaky"), &testpb.DeductRequest{Sku: "flaky"})
			if err != nil || r.GetRun() != 2 || runs.Load() != 2 {
				t.Fatalf("after Unavailable: %v %v, runs %d; want run 2", r, err, runs.Load())
			}
		}
	})
}

// blocking is a Deduct whose calls for sku "slow" wait for release (or
// their context); entered gets a value as each starts.
func blocking(runs *atomic.Int64, entered chan<- struct{}, release <-chan struct{}) *stock {
	return &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		n := runs.Add(1)
		if req.GetSku() == "slow" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &testpb.DeductReply{Sku: req.GetSku(), Run: n}, nil
	}}
}

func TestIdempotencyInFlightAndMismatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		var decided decisions
		entered, release := make(chan struct{}, 1), make(chan struct{})
		client := idem(t, b, grpcmw.IdempotencyConfig{OnDecision: decided.record, RetryAfter: 1500 * time.Millisecond},
			blocking(&runs, entered, release))
		slow := &testpb.DeductRequest{Sku: "slow", Qty: 1}
		done := make(chan error, 1)
		go func() {
			_, err := client.Deduct(as(t, "A", "k"), slow)
			done <- err
		}()
		<-entered

		var hdr metadata.MD
		_, err := client.Deduct(as(t, "A", "k"), slow, grpc.Header(&hdr))
		isStatus(t, err, codes.Aborted, grpcmw.ReasonInFlight)
		if d, ok := grpcmw.RetryDelay(err); !ok || d != 1500*time.Millisecond {
			t.Errorf("RetryInfo %v %v, want 1.5s", d, ok)
		}
		if got := hdr.Get(grpcmw.MetadataRetryAfter); len(got) != 1 || got[0] != "2" {
			t.Errorf("header %v, want retry-after: 2 (1.5s rounded up)", hdr)
		}
		// Another request under the key in flight is a mismatch, not in flight.
		_, err = client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{Sku: "slow", Qty: 2})
		isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonKeyReused)

		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		_, err = client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{Sku: "slow", Qty: 2})
		isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonKeyReused)
		r, err := client.Deduct(as(t, "A", "k"), slow)
		if err != nil || r.GetRun() != 1 || runs.Load() != 1 {
			t.Fatalf("replay %v %v, runs %d", r, err, runs.Load())
		}
		if got := decided.outcomes(); got != "first in_flight mismatch mismatch replayed" {
			t.Errorf("decisions %q", got)
		}
	})
}

func TestIdempotencyWaitInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		entered, release := make(chan struct{}, 1), make(chan struct{})
		client := idem(t, b, grpcmw.IdempotencyConfig{WaitInFlight: 10 * time.Second}, blocking(&runs, entered, release))
		slow := &testpb.DeductRequest{Sku: "slow"}
		done := make(chan *testpb.DeductReply, 1)
		go func() {
			r, err := client.Deduct(as(t, "A", "k"), slow)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		<-entered
		go func() {
			time.Sleep(50 * time.Millisecond) // the second call is waiting by then, or arrives after the first
			close(release)
		}()
		r, err := client.Deduct(as(t, "A", "k"), slow)
		if err != nil || r.GetRun() != 1 || (<-done).GetRun() != 1 || runs.Load() != 1 {
			t.Fatalf("waiter got %v %v, runs %d; want the first call's result", r, err, runs.Load())
		}
	})
}

func TestIdempotencyKeysAndPrincipals(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	b := &backend{store: store}
	var runs atomic.Int64
	required := idem(t, b, grpcmw.IdempotencyConfig{Require: true, Principal: func(ctx context.Context) (string, error) {
		who, err := tenant(ctx)
		if who == "banned" {
			return "", status.Error(codes.PermissionDenied, "banned")
		}
		return who, err
	}}, counting(&runs))
	req := &testpb.DeductRequest{Sku: "sku-1"}

	_, err := required.Deduct(as(t, "A", ""), req)
	isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonKeyMissing)
	_, err = required.Deduct(outgoing(as(t, "A", "k1"), "idempotency-key", "k2"), req)
	isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonInvalidKey)
	_, err = required.Deduct(as(t, "A", strings.Repeat("k", 256)), req)
	isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonInvalidKey)
	_, err = required.Deduct(as(t, "", "k1"), req)
	isStatus(t, err, codes.Unauthenticated, grpcmw.ReasonUnauthenticated)
	_, err = required.Deduct(as(t, "banned", "k1"), req)
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "banned" {
		t.Errorf("a Principal's status error: got %v, want it as it is", err)
	}
	if runs.Load() != 0 {
		t.Fatalf("%d runs of rejected calls", runs.Load())
	}

	optional := idem(t, b, grpcmw.IdempotencyConfig{}, counting(&runs))
	for range 2 {
		if _, err := optional.Deduct(as(t, "", ""), req); err != nil { // no key, no principal needed
			t.Fatal(err)
		}
	}
	elsewhere := idem(t, b, grpcmw.IdempotencyConfig{Methods: []string{"/shop.Orders/Create"}}, counting(&runs))
	for range 2 {
		if _, err := elsewhere.Deduct(as(t, "A", "k1"), req); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 4 {
		t.Fatalf("runs %d; want 4: calls without a key, and calls of other Methods, are not deduplicated", runs.Load())
	}

	// The default Principal hashes the authorization metadata.
	x := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store}))
	byAuth := serve(t, counting(&runs), unary(x.UnaryServerInterceptor()))
	_, err = byAuth.Deduct(as(t, "", "k1"), req)
	isStatus(t, err, codes.Unauthenticated, grpcmw.ReasonUnauthenticated)
	var got []int64
	for _, token := range []string{"Bearer a", "Bearer a", "Bearer b"} {
		r, err := byAuth.Deduct(outgoing(as(t, "", "k1"), "authorization", token), req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.GetRun())
	}
	if got[0] != got[1] || got[1] == got[2] {
		t.Errorf("runs %v: want one per authorization", got)
	}
}

func TestIdempotencyPanicStoresNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		var decided decisions
		client := idem(t, b, grpcmw.IdempotencyConfig{OnDecision: decided.record},
			&stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
				if runs.Add(1) == 1 {
					panic("boom")
				}
				return &testpb.DeductReply{Run: runs.Load()}, nil
			}})
		_, err := client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{Sku: "x"})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("got %v, want the recovered panic", err)
		}
		// The lease was given back (not in flight) and nothing was stored
		// (not replayed): the retry runs.
		for range 2 {
			r, err := client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{Sku: "x"})
			if err != nil || r.GetRun() != 2 {
				t.Fatalf("after the panic: %v %v, want run 2", r, err)
			}
		}
		if got := decided.outcomes(); got != "first not_stored first replayed" {
			t.Errorf("decisions %q", got)
		}
	})
}

func TestIdempotencyDeadlineAndCancel(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		entered := make(chan struct{}, 2)
		ended := make(chan error, 2)
		client := idem(t, b, grpcmw.IdempotencyConfig{WaitInFlight: 10 * time.Second},
			&stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
				n := runs.Add(1)
				if req.GetQty() == int64(n) { // the first run of each request waits for its caller to give up
					entered <- struct{}{}
					<-ctx.Done()
					ended <- context.Cause(ctx)
					return nil, ctx.Err()
				}
				return &testpb.DeductReply{Run: n}, nil
			}})

		// A deadline: the client gives up, the handler's context ends, the
		// result (DeadlineExceeded) is not stored, and the retry runs.
		ctx, cancel := context.WithTimeout(as(t, "A", "k-deadline"), 200*time.Millisecond)
		defer cancel()
		_, err := client.Deduct(ctx, &testpb.DeductRequest{Qty: 1})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
		if cause := <-ended; cause == nil { // DeadlineExceeded, or Canceled when the client's cancel arrives first
			t.Errorf("handler's context did not end")
		}
		r, err := client.Deduct(as(t, "A", "k-deadline"), &testpb.DeductRequest{Qty: 1})
		if err != nil || r.GetRun() != 2 {
			t.Fatalf("retry after the deadline: %v %v, want run 2", r, err)
		}

		// A cancellation, the same way.
		ctx, cancel = context.WithCancel(as(t, "A", "k-cancel"))
		go func() {
			<-entered
			<-entered // the deadline's run entered first
			cancel()
		}()
		_, err = client.Deduct(ctx, &testpb.DeductRequest{Qty: 3})
		if status.Code(err) != codes.Canceled {
			t.Fatalf("got %v, want Canceled", err)
		}
		if cause := <-ended; !errors.Is(cause, context.Canceled) {
			t.Errorf("handler's context ended with %v", cause)
		}
		r, err = client.Deduct(as(t, "A", "k-cancel"), &testpb.DeductRequest{Qty: 3})
		if err != nil || r.GetRun() != 4 {
			t.Fatalf("retry after the cancellation: %v %v, want run 4", r, err)
		}
	})
}

func TestIdempotencyLeaseLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		if b.drop == nil {
			t.Skip("a memory lease cannot be taken away")
		}
		var runs atomic.Int64
		var decided decisions
		entered, cause := make(chan struct{}, 1), make(chan error, 1)
		client := idem(t, b, grpcmw.IdempotencyConfig{LeaseTTL: 300 * time.Millisecond, OnDecision: decided.record},
			&stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
				if runs.Add(1) == 1 {
					entered <- struct{}{}
					select {
					case <-ctx.Done():
						cause <- context.Cause(ctx)
						return nil, ctx.Err()
					case <-time.After(10 * time.Second):
						cause <- nil
					}
				}
				return &testpb.DeductReply{Run: runs.Load()}, nil
			}})
		done := make(chan error, 1)
		go func() {
			_, err := client.Deduct(as(t, "A", "k-lost"), &testpb.DeductRequest{Sku: "x"})
			done <- err
		}()
		<-entered
		// The lease (not its fence counter) disappears behind the holder's back.
		if n := b.drop(t, "k-lost", func(k string) bool { return strings.HasSuffix(k, "}") }); n != 1 {
			t.Fatalf("dropped %d keys, want the lease", n)
		}
		if c := <-cause; !errors.Is(c, core.ErrLost) || !errors.Is(c, httpidem.ErrLost) {
			t.Fatalf("handler's context ended with %v, want the lease lost", c)
		}
		isStatus(t, <-done, codes.Aborted, grpcmw.ReasonLockLost)
		r, err := client.Deduct(as(t, "A", "k-lost"), &testpb.DeductRequest{Sku: "x"})
		if err != nil || r.GetRun() != 2 {
			t.Fatalf("retry: %v %v, want run 2 (nothing stored)", r, err)
		}
		if got := decided.outcomes(); got != "first lease_lost first" {
			t.Errorf("decisions %q", got)
		}
	})
}

func TestIdempotencyResultTooLarge(t *testing.T) {
	var runs atomic.Int64
	var decided decisions
	b := &backend{store: must(httpidem.NewMemoryStore())}
	t.Cleanup(func() { b.store.Close() })
	client := idem(t, b, grpcmw.IdempotencyConfig{MaxResultSize: 100, OnDecision: decided.record}, counting(&runs))
	for want := int64(1); want <= 2; want++ {
		r, err := client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{Sku: strings.Repeat("s", 200)})
		if err != nil || r.GetRun() != want {
			t.Fatalf("%v %v, want run %d: a result over MaxResultSize is answered, not stored", r, err, want)
		}
	}
	if got := decided.outcomes(); got != "first not_stored first not_stored" {
		t.Errorf("decisions %q", got)
	}
}

func TestIdempotencyStoreDown(t *testing.T) {
	mr, _ := redistest.Miniredis(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	store := must(httpidem.NewRedisStore(rdb))
	t.Cleanup(func() { store.Close(); rdb.Close() })
	mr.Close()
	var runs atomic.Int64
	b := &backend{store: store}
	closed := idem(t, b, grpcmw.IdempotencyConfig{}, counting(&runs))
	ctx, cancel := context.WithTimeout(as(t, "A", "k"), 5*time.Second)
	defer cancel()
	_, err := closed.Deduct(ctx, &testpb.DeductRequest{})
	isStatus(t, err, codes.Unavailable, grpcmw.ReasonUnavailable)
	open := idem(t, b, grpcmw.IdempotencyConfig{FailOpen: true}, counting(&runs))
	if _, err := open.Deduct(ctx, &testpb.DeductRequest{}); err != nil || runs.Load() != 1 {
		t.Fatalf("FailOpen: %v, runs %d", err, runs.Load())
	}
}

// TestIdempotencyWithoutServer calls the interceptor directly, as a unit
// test of a handler would: no transport stream, no metadata sent, the
// same decisions.
func TestIdempotencyWithoutServer(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	ic := must(grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Principal: tenant})).UnaryServerInterceptor()
	runs := 0
	handler := func(ctx context.Context, req any) (any, error) {
		runs++
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-run", "1")); err != nil {
			t.Errorf("SetHeader under the interceptor: %v", err)
		}
		return &testpb.DeductReply{Run: int64(runs)}, nil
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "A", "idempotency-key", "k"))
	info := &grpc.UnaryServerInfo{FullMethod: testpb.Stock_Deduct_FullMethodName}
	for range 2 {
		resp, err := ic(ctx, &testpb.DeductRequest{Sku: "x"}, info, handler)
		if err != nil || resp.(*testpb.DeductReply).GetRun() != 1 {
			t.Fatalf("%v %v", resp, err)
		}
	}
	// The fingerprint holds the method: the same request to another one is
	// another request.
	other := &grpc.UnaryServerInfo{FullMethod: "/latchkey.grpcmw.test.Stock/Restock"}
	if _, err := ic(ctx, &testpb.DeductRequest{Sku: "x"}, other, handler); status.Code(err) != codes.InvalidArgument ||
		grpcmw.Reason(err) != grpcmw.ReasonKeyReused {
		t.Errorf("same key and request, another method: %v", err)
	}
	if _, err := ic(ctx, "not a message", info, handler); status.Code(err) != codes.Internal {
		t.Errorf("a request that is not a proto.Message: %v", err)
	}
}

func TestNewIdempotencyErrors(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	t.Cleanup(func() { store.Close() })
	for name, cfg := range map[string]grpcmw.IdempotencyConfig{
		"no store":      {},
		"nil store":     {Store: (*httpidem.MemoryStore)(nil)},
		"bad method":    {Store: store, Methods: []string{"Deduct"}},
		"method slash":  {Store: store, Methods: []string{"/a.B/C/D"}},
		"negative size": {Store: store, MaxResultSize: -1},
		"negative wait": {Store: store, WaitInFlight: -time.Second},
		"bad scope":     {Store: store, Scope: "a\nb"},
	} {
		if _, err := grpcmw.NewIdempotency(cfg); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := grpcmw.NewIdempotency(grpcmw.IdempotencyConfig{Store: store, Methods: []string{testpb.Stock_Deduct_FullMethodName}}); err != nil {
		t.Error(err)
	}
}

func TestDefaultStoreCode(t *testing.T) {
	stored := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true,
		codes.PermissionDenied: true, codes.FailedPrecondition: true, codes.OutOfRange: true, codes.Unimplemented: true}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if grpcmw.DefaultStoreCode(c) != stored[c] {
			t.Errorf("DefaultStoreCode(%v) = %v", c, !stored[c])
		}
	}
}

// TestIdempotencyStoredResult: binary metadata survives the store, and a
// stored result that cannot be read is answered Internal, never run again
// or replayed wrong.
func TestIdempotencyStoredResult(t *testing.T) {
	mr, rdb := redistest.Miniredis(t, true)
	b := redisBackend(t, rdb, "test", mrDrop(mr))
	var runs atomic.Int64
	blob := string([]byte{0, 1, 2, 0xff, '\n'})
	client := idem(t, b, grpcmw.IdempotencyConfig{}, &stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-blob-bin", blob, "x-multi", "1", "x-multi", "2"))
		return &testpb.DeductReply{Run: runs.Add(1)}, nil
	}})
	for range 2 {
		var hdr metadata.MD
		if _, err := client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatal(err)
		}
		if got := hdr.Get("x-blob-bin"); len(got) != 1 || got[0] != blob || len(hdr.Get("x-multi")) != 2 {
			t.Fatalf("header %q", hdr)
		}
	}
	var recs []string
	for _, k := range mr.Keys() {
		if strings.HasSuffix(k, ":resp") {
			recs = append(recs, k)
		}
	}
	if len(recs) != 1 {
		t.Fatalf("records %q", recs)
	}
	v, _ := mr.Get(recs[0])
	mr.Set(recs[0], strings.Replace(v, "LKG1", "LKG0", 1))
	_, err := client.Deduct(as(t, "A", "k"), &testpb.DeductRequest{})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "cannot be replayed") || runs.Load() != 1 {
		t.Fatalf("a corrupted record: %v, runs %d", err, runs.Load())
	}
}
