package grpcmw_test

import (
	"context"
	"errors"
	"strings"
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

// tenantKey is the Key of the limit tests: the tenant; sku "free" is not
// limited.
func tenantKey(ctx context.Context, _ string, req any) (string, error) {
	if r, ok := req.(*testpb.DeductRequest); ok && r.GetSku() == "free" {
		return "", nil
	}
	return tenant(ctx)
}

// limited serves svc behind recovery and the Limit of cfg, whose Locks
// (nil: b's) and Key (nil: tenantKey) are filled in.
func limited(t *testing.T, b *backend, cfg grpcmw.LimitConfig, svc *stock) testpb.StockClient {
	t.Helper()
	if cfg.Locks == nil {
		cfg.Locks = b.locks
	}
	if cfg.Key == nil {
		cfg.Key = tenantKey
	}
	l, err := grpcmw.NewLimit(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, svc, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recovery, l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(streamRecovery, l.StreamServerInterceptor()),
	})
}

func TestLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var decided decisions
		entered, release := make(chan context.Context, 4), make(chan struct{})
		svc := holding(entered, release)
		client := limited(t, b, grpcmw.LimitConfig{Limit: 2, Name: "deduct", OnDecision: decided.record}, svc)
		waits := limited(t, b, grpcmw.LimitConfig{Limit: 2, Name: "deduct", WaitTimeout: 10 * time.Second}, svc)

		done := make(chan error, 3)
		for range 2 {
			go func() {
				_, err := client.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "slow"})
				done <- err
			}()
			ctx := <-entered
			if _, ok := core.FenceFromContext(ctx); !ok {
				t.Error("no permit's fence in the handler's context")
			}
		}
		var hdr metadata.MD
		_, err := client.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "slow"}, grpc.Header(&hdr))
		isStatus(t, err, codes.ResourceExhausted, grpcmw.ReasonLimited)
		if d, ok := grpcmw.RetryDelay(err); !ok || d != time.Second || mdValue(hdr, grpcmw.MetadataRetryAfter) != "1" {
			t.Errorf("RetryInfo %v %v, header %v; want 1s", d, ok, hdr)
		}
		// Another tenant, and calls the Key exempts, are not held up.
		if _, err := client.Deduct(as(t, "B", ""), &testpb.DeductRequest{Sku: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "free"}); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := waits.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "x"})
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		close(release)
		for range 3 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if got := decided.outcomes(); got != "acquired acquired limited acquired" {
			t.Errorf("decisions %q", got)
		}
	})
}

func TestLimitStreams(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		entered, release := make(chan context.Context, 2), make(chan struct{})
		client := limited(t, b, grpcmw.LimitConfig{Limit: 1}, holding(entered, release))
		held, err := client.Watch(as(t, "A", ""), &testpb.WatchRequest{Sku: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := held.Recv(); err != nil {
			t.Fatal(err)
		}
		<-entered
		s, err := client.Watch(as(t, "A", ""), &testpb.WatchRequest{Sku: "slow"})
		if err == nil {
			_, err = s.Recv()
		}
		isStatus(t, err, codes.ResourceExhausted, grpcmw.ReasonLimited)
		close(release)
		if _, err := held.Recv(); err == nil {
			t.Fatal("held stream did not end")
		}
		waitFor(t, "the permit to come back", func() bool {
			s, err := client.Watch(as(t, "A", ""), &testpb.WatchRequest{Sku: "x"})
			if err == nil {
				_, err = s.Recv()
			}
			return err == nil
		})
	})
}

func TestLimitPermitLostAndPanic(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		entered, release := make(chan context.Context, 1), make(chan struct{})
		client := limited(t, b, grpcmw.LimitConfig{Limit: 1, TTL: 300 * time.Millisecond}, holding(entered, release))
		for range 2 { // the second finds the permit free: the panic gave it back
			_, err := client.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "panic"})
			if status.Code(err) != codes.Internal {
				t.Fatalf("got %v, want the recovered panic", err)
			}
		}
		if b.drop == nil {
			return // a memory permit cannot be taken away
		}
		done := make(chan error, 1)
		go func() {
			_, err := client.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "slow"})
			done <- err
		}()
		ctx := <-entered
		if n := b.drop(t, "limit|A", nil); n == 0 {
			t.Fatal("no permit to drop")
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled")
		}
		if !errors.Is(context.Cause(ctx), core.ErrLost) {
			t.Errorf("cause %v, want the permit lost", context.Cause(ctx))
		}
		isStatus(t, <-done, codes.Aborted, grpcmw.ReasonLockLost)
	})
}

func TestLimitKeyErrors(t *testing.T) {
	locks := must(core.NewMemory())
	t.Cleanup(func() { locks.Close() })
	b := &backend{locks: locks}
	var decided decisions
	client := limited(t, b, grpcmw.LimitConfig{Limit: 1, OnDecision: decided.record, Key: func(ctx context.Context, m string, req any) (string, error) {
		if req.(*testpb.DeductRequest).GetSku() == "denied" {
			return "", status.Error(codes.PermissionDenied, "not yours")
		}
		return tenantKey(ctx, m, req)
	}}, holding(make(chan context.Context, 1), nil))
	_, err := client.Deduct(as(t, "", ""), &testpb.DeductRequest{Sku: "x"})
	isStatus(t, err, codes.Unauthenticated, grpcmw.ReasonUnauthenticated)
	_, err = client.Deduct(as(t, "A", ""), &testpb.DeductRequest{Sku: "denied"})
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "not yours" {
		t.Errorf("a Key's status error: %v", err)
	}
	_, err = client.Deduct(as(t, strings.Repeat("t", 257), ""), &testpb.DeductRequest{Sku: "x"})
	isStatus(t, err, codes.InvalidArgument, grpcmw.ReasonInvalidRequest)
	if got := decided.outcomes(); got != "unauthenticated unauthenticated invalid" {
		t.Errorf("decisions %q", got)
	}

	for name, cfg := range map[string]grpcmw.LimitConfig{
		"no locks": {Limit: 1, Key: tenantKey},
		"no key":   {Locks: locks, Limit: 1},
		"no limit": {Locks: locks, Key: tenantKey},
		"too many": {Locks: locks, Key: tenantKey, Limit: core.MaxSemaphoreLimit + 1},
		"bad wait": {Locks: locks, Key: tenantKey, Limit: 1, WaitTimeout: -1},
	} {
		if _, err := grpcmw.NewLimit(cfg); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
