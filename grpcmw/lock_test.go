package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/grpcmw"
	"github.com/latchkey/latchkey/grpcmw/internal/testpb"
	"github.com/latchkey/latchkey/httpidem"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// skuKey is the Key of the lock tests: a Deduct's SKU, a stream's x-sku
// metadata ("": unlocked).
func skuKey(ctx context.Context, _ string, req any) (string, error) {
	if r, ok := req.(*testpb.DeductRequest); ok {
		return r.GetSku(), nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-sku"); len(v) > 0 {
		return v[0], nil
	}
	return "", nil
}

// locked serves svc behind recovery and the Lock of cfg, whose Locks (nil:
// b's) and Key (nil: skuKey) are filled in, for unary calls and streams.
func locked(t *testing.T, b *backend, cfg grpcmw.LockConfig, svc *stock) testpb.StockClient {
	t.Helper()
	if cfg.Locks == nil {
		cfg.Locks = b.locks
	}
	if cfg.Key == nil {
		cfg.Key = skuKey
	}
	l, err := grpcmw.NewLock(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, svc, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recovery, l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(streamRecovery, l.StreamServerInterceptor()),
	})
}

func TestLockOneAtATime(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var inside, maxInside atomic.Int64
		var mu sync.Mutex
		var fences []int64
		client := locked(t, b, grpcmw.LockConfig{WaitTimeout: 30 * time.Second},
			&stock{deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
				n := inside.Add(1)
				defer inside.Add(-1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				fence, ok := core.FenceFromContext(ctx)
				if !ok {
					t.Error("no fence in the handler's context")
				}
				mu.Lock()
				fences = append(fences, fence)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the read-modify-write a lock protects
				return &testpb.DeductReply{}, nil
			}})
		const n = 12
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "sku-1"}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if maxInside.Load() != 1 || len(fences) != n {
			t.Fatalf("at most %d at once (want 1), %d runs (want %d)", maxInside.Load(), len(fences), n)
		}
		for i := 1; i < n; i++ {
			if fences[i] <= fences[i-1] {
				t.Fatalf("fences %v do not rise with each holder", fences)
			}
		}
	})
}

// holding is a service whose Deduct of sku "slow..." and whose Watch hold
// until release (or their context ends); entered gets each one's context.
func holding(entered chan<- context.Context, release <-chan struct{}) *stock {
	hold := func(ctx context.Context) error {
		entered <- ctx
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return &stock{
		deduct: func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
			if req.GetSku() == "panic" {
				panic("boom")
			}
			if strings.HasPrefix(req.GetSku(), "slow") {
				if err := hold(ctx); err != nil {
					return nil, err
				}
			}
			return &testpb.DeductReply{Sku: req.GetSku()}, nil
		},
		watch: func(req *testpb.WatchRequest, ss grpc.ServerStreamingServer[testpb.Level]) error {
			if req.GetSku() == "panic" {
				panic("boom")
			}
			if _, ok := core.FenceFromContext(ss.Context()); !ok && req.GetSku() == "fenced" {
				return status.Error(codes.Internal, "no fence in the stream's context")
			}
			if err := ss.Send(&testpb.Level{Sku: req.GetSku(), Qty: 1}); err != nil {
				return err
			}
			if strings.HasPrefix(req.GetSku(), "slow") {
				return hold(ss.Context())
			}
			return nil
		},
	}
}

func TestLockBusyAndWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var decided decisions
		entered, release := make(chan context.Context, 4), make(chan struct{})
		svc := holding(entered, release)
		noWait := locked(t, b, grpcmw.LockConfig{OnDecision: decided.record, RetryAfter: 2 * time.Second}, svc)
		waits := locked(t, b, grpcmw.LockConfig{WaitTimeout: 10 * time.Second}, svc)
		briefly := locked(t, b, grpcmw.LockConfig{WaitTimeout: 100 * time.Millisecond}, svc)

		first := make(chan error, 1)
		go func() {
			_, err := noWait.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-1"})
			first <- err
		}()
		<-entered

		var hdr metadata.MD
		_, err := noWait.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-1"}, grpc.Header(&hdr))
		isStatus(t, err, codes.Aborted, grpcmw.ReasonLocked)
		if d, ok := grpcmw.RetryDelay(err); !ok || d != 2*time.Second || mdValue(hdr, grpcmw.MetadataRetryAfter) != "2" {
			t.Errorf("RetryInfo %v %v, header %v; want 2s", d, ok, hdr)
		}
		start := time.Now()
		_, err = briefly.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-1"})
		isStatus(t, err, codes.Aborted, grpcmw.ReasonLocked)
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Errorf("gave up after %v, want WaitTimeout (100ms)", waited)
		}
		// Other keys, and calls without one, are not held up.
		for _, sku := range []string{"sku-2", ""} {
			if _, err := noWait.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: sku}); err != nil {
				t.Fatalf("sku %q: %v", sku, err)
			}
		}

		waited := make(chan error, 1)
		go func() {
			_, err := waits.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-1"})
			waited <- err
		}()
		time.Sleep(50 * time.Millisecond)
		close(release) // the holder returns; the waiter takes the lock and runs (and returns at once)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		if got := decided.outcomes(); got != "acquired locked acquired" {
			t.Errorf("decisions %q (calls without a key decide nothing)", got)
		}
	})
}

func TestLockLostCancelsTheHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		if b.drop == nil {
			t.Skip("a memory lock cannot be taken away")
		}
		var decided decisions
		entered, release := make(chan context.Context, 1), make(chan struct{})
		client := locked(t, b, grpcmw.LockConfig{TTL: 300 * time.Millisecond, OnDecision: decided.record}, holding(entered, release))
		done := make(chan error, 1)
		go func() {
			_, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-lost"})
			done <- err
		}()
		ctx := <-entered
		if n := b.drop(t, "key=slow-lost", func(k string) bool { return strings.HasSuffix(k, "}") }); n != 1 {
			t.Fatalf("dropped %d keys, want the lease", n)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled")
		}
		if c := context.Cause(ctx); !errors.Is(c, core.ErrLost) || !errors.Is(c, httpidem.ErrLost) {
			t.Errorf("cause %v, want the lock lost", c)
		}
		isStatus(t, <-done, codes.Aborted, grpcmw.ReasonLockLost)
		if got := decided.outcomes(); got != "acquired lock_lost" {
			t.Errorf("decisions %q", got)
		}
	})
}

func TestLockPanicReleases(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		entered := make(chan context.Context, 1)
		client := locked(t, b, grpcmw.LockConfig{}, holding(entered, nil))
		for range 2 { // the second finds the lock free: the panic gave it back
			_, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "panic"})
			if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("got %v, want the recovered panic", err)
			}
			stream, err := client.Watch(outgoing(as(t, "", ""), "x-sku", "panic"), &testpb.WatchRequest{Sku: "panic"})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.Internal {
				t.Fatalf("stream: got %v, want the recovered panic", err)
			}
		}
	})
}

func TestLockStreams(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		entered, release := make(chan context.Context, 2), make(chan struct{})
		client := locked(t, b, grpcmw.LockConfig{}, holding(entered, release))
		ctx := outgoing(as(t, "", ""), "x-sku", "slow-s")
		held, err := client.Watch(ctx, &testpb.WatchRequest{Sku: "slow-s"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := held.Recv(); err != nil {
			t.Fatal(err)
		}
		<-entered

		var hdr metadata.MD
		busy, err := client.Watch(ctx, &testpb.WatchRequest{Sku: "slow-s"}, grpc.Header(&hdr))
		if err == nil {
			_, err = busy.Recv()
		}
		isStatus(t, err, codes.Aborted, grpcmw.ReasonLocked)
		if mdValue(hdr, grpcmw.MetadataRetryAfter) != "1" {
			t.Errorf("header %v, want retry-after: 1", hdr)
		}
		// A stream with a key has its lock's fence in its context; one
		// without runs unlocked, without a fence.
		for _, md := range [][]string{{"x-sku", "fenced"}, nil} {
			s, err := client.Watch(outgoing(as(t, "", ""), md...), &testpb.WatchRequest{Sku: "fenced"})
			if err == nil {
				_, err = s.Recv()
			}
			if keyed := md != nil; keyed != (err == nil) {
				t.Fatalf("stream with metadata %v: %v", md, err)
			}
		}

		close(release)
		if _, err := held.Recv(); err != io.EOF {
			t.Fatalf("held stream ended with %v", err)
		}
		again, err := client.Watch(ctx, &testpb.WatchRequest{Sku: "slow-s"})
		if err == nil {
			_, err = again.Recv()
		}
		if err != nil {
			t.Fatalf("after the release: %v", err)
		}
		<-entered
	})
}

// TestLockDeadlineWhileWaiting: a call waiting for a held lock ends with
// its deadline; its handler never runs, and it leaves nothing behind.
func TestLockDeadlineWhileWaiting(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var runs atomic.Int64
		entered, release := make(chan context.Context, 1), make(chan struct{})
		svc := holding(entered, release)
		deduct := svc.deduct
		svc.deduct = func(ctx context.Context, req *testpb.DeductRequest) (*testpb.DeductReply, error) {
			runs.Add(1)
			return deduct(ctx, req)
		}
		var decided decisions
		client := locked(t, b, grpcmw.LockConfig{WaitTimeout: 30 * time.Second, OnDecision: decided.record}, svc)
		first := make(chan error, 1)
		go func() {
			_, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-d"})
			first <- err
		}()
		<-entered
		ctx, cancel := context.WithTimeout(as(t, "", ""), 200*time.Millisecond)
		defer cancel()
		_, err := client.Deduct(ctx, &testpb.DeductRequest{Sku: "slow-d"})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
		// The server gives up too: its context has the call's deadline.
		waitFor(t, "the waiter to give up", func() bool { return decided.outcomes() == "acquired locked" })
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if runs.Load() != 1 {
			t.Fatalf("runs %d: the call that gave up ran", runs.Load())
		}
		// Nothing was left behind: a call that does not wait gets the lock
		// (soon: its waiter may still be leaving), long before the TTL.
		free := locked(t, b, grpcmw.LockConfig{}, svc)
		waitFor(t, "the lock to be free", func() bool {
			_, err := free.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "slow-d"})
			return err == nil
		})
	})
}

func TestLockKeyErrors(t *testing.T) {
	locks := must(core.NewMemory())
	t.Cleanup(func() { locks.Close() })
	b := &backend{locks: locks}
	svc := holding(make(chan context.Context, 1), nil)
	client := locked(t, b, grpcmw.LockConfig{Key: func(ctx context.Context, _ string, req any) (string, error) {
		switch sku := req.(*testpb.DeductRequest).GetSku(); sku {
		case "bad":
			return "", errors.New("no such field")
		case "denied":
			return "", status.Error(codes.PermissionDenied, "not yours")
		default:
			return sku, nil
		}
	}}, svc)
	_, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "bad"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no such field") {
		t.Errorf("a Key error: %v", err)
	}
	_, err = client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "denied"})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "not yours" {
		t.Errorf("a Key's status error: %v", err)
	}
	_, err = client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: strings.Repeat("x", 129)})
	isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonInvalidRequest)
	_, err = client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "a\x00b"})
	isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonInvalidRequest)

	for name, cfg := range map[string]grpcmw.LockConfig{
		"no locks": {Key: skuKey},
		"no key":   {Locks: locks},
		"bad name": {Locks: locks, Key: skuKey, Name: "a\nb"},
		"bad ttl":  {Locks: locks, Key: skuKey, TTL: -time.Second},
		"long key": {Locks: locks, Key: skuKey, MaxKeyLength: 257},
	} {
		if _, err := grpcmw.NewLock(cfg); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
