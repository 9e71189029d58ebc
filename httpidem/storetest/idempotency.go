package storetest

import (
	"bytes"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

// RunIdempotency checks an httpidem.IdempotencyStore: leases, in-flight
// holders, records, waiting, argument checks and concurrent Begins.
func RunIdempotency(t *testing.T, newStore func(t *testing.T) httpidem.IdempotencyStore) {
	t.Helper()
	tests := []struct {
		name string
		f    func(t *testing.T, s httpidem.IdempotencyStore)
	}{
		{"FirstBeginLeases", testFirstBeginLeases},
		{"HolderIsInFlight", testHolderIsInFlight},
		{"CompleteReplays", testCompleteReplays},
		{"ReleaseFreesKey", testReleaseFreesKey},
		{"WaitGetsRecord", testWaitGetsRecord},
		{"InvalidArguments", testBeginInvalid},
		{"OneLeaseUnderConcurrency", testOneLease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, newStore(t)) })
	}
}

func beginArgs(key, fp string) httpidem.BeginArgs {
	return httpidem.BeginArgs{Key: "idem:" + key, Fingerprint: fp, LeaseTTL: 10 * time.Second}
}

// lease begins key and fails unless the caller got the lease.
func lease(t *testing.T, s httpidem.IdempotencyStore, key, fp string) httpidem.Lease {
	t.Helper()
	b, err := s.Begin(t.Context(), beginArgs(key, fp))
	if err != nil {
		t.Fatalf("Begin %s: %v", key, err)
	}
	if b.Lease == nil || b.Record != nil || b.InFlight != nil {
		t.Fatalf("Begin %s: %+v, want a Lease only", key, b)
	}
	return b.Lease
}

func testFirstBeginLeases(t *testing.T, s httpidem.IdempotencyStore) {
	l := lease(t, s, "first", "fp")
	if l.Err() != nil {
		t.Fatalf("fresh lease Err = %v", l.Err())
	}
	select {
	case <-l.Lost():
		t.Fatal("fresh lease is lost")
	default:
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func testHolderIsInFlight(t *testing.T, s httpidem.IdempotencyStore) {
	l := lease(t, s, "busy", "fp-1")
	t.Cleanup(func() { _ = l.Release(t.Context()) })
	for _, fp := range []string{"fp-1", "fp-2"} {
		b, err := s.Begin(t.Context(), beginArgs("busy", fp))
		if err != nil {
			t.Fatalf("Begin while held (%s): %v (contention is not an error)", fp, err)
		}
		if b.InFlight == nil || b.Lease != nil || b.Record != nil {
			t.Fatalf("Begin while held (%s): %+v, want InFlight", fp, b)
		}
		if b.InFlight.Fingerprint != "fp-1" {
			t.Fatalf("InFlight.Fingerprint = %q, want the holder's fp-1", b.InFlight.Fingerprint)
		}
	}
}

func testCompleteReplays(t *testing.T, s httpidem.IdempotencyStore) {
	l := lease(t, s, "done", "fp")
	body := []byte("{\"id\":42}\n\x00\xff binary\r\n")
	rec := &httpidem.Record{Fingerprint: "fp", Status: http.StatusCreated, Body: body,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/42"}, "Etag": {`"a"`, `"b"`}}}
	if err := l.Complete(t.Context(), rec, time.Minute); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	for range 2 {
		b, err := s.Begin(t.Context(), beginArgs("done", "other"))
		if err != nil {
			t.Fatalf("Begin after Complete: %v", err)
		}
		got := b.Record
		if got == nil || b.Lease != nil || b.InFlight != nil {
			t.Fatalf("Begin after Complete: %+v, want the Record", b)
		}
		if got.Fingerprint != "fp" || got.Status != rec.Status || !bytes.Equal(got.Body, body) {
			t.Fatalf("Record = %+v, want %+v", got, rec)
		}
		for name, vs := range rec.Header {
			if g := got.Header[name]; len(g) != len(vs) || (len(vs) > 0 && g[0] != vs[0]) || g[len(g)-1] != vs[len(vs)-1] {
				t.Fatalf("Record header %s = %q, want %q", name, g, vs)
			}
		}
	}
}

func testReleaseFreesKey(t *testing.T, s httpidem.IdempotencyStore) {
	l := lease(t, s, "again", "fp")
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l2 := lease(t, s, "again", "fp")
	if err := l2.Complete(t.Context(), &httpidem.Record{Fingerprint: "fp", Status: 200}, time.Minute); err != nil {
		t.Fatalf("Complete after re-lease: %v", err)
	}
	if err := l.Release(t.Context()); !errors.Is(err, httpidem.ErrLost) && err != nil {
		t.Fatalf("second Release of an ended lease: %v, want nil or ErrLost", err)
	}
}

func testWaitGetsRecord(t *testing.T, s httpidem.IdempotencyStore) {
	l := lease(t, s, "wait", "fp")
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = l.Complete(t.Context(), &httpidem.Record{Fingerprint: "fp", Status: 202, Body: []byte("ok")}, time.Minute)
	}()
	a := beginArgs("wait", "fp")
	a.Wait = 5 * time.Second
	b, err := s.Begin(t.Context(), a)
	if err != nil {
		t.Fatalf("Begin with Wait: %v", err)
	}
	if b.Record == nil || b.Record.Status != 202 || string(b.Record.Body) != "ok" {
		if b.Lease != nil {
			_ = b.Lease.Release(t.Context())
		}
		t.Fatalf("Begin with Wait: %+v, want the holder's Record", b)
	}
}

func testBeginInvalid(t *testing.T, s httpidem.IdempotencyStore) {
	for name, a := range map[string]httpidem.BeginArgs{
		"empty key": {Key: "", Fingerprint: "fp", LeaseTTL: time.Second},
		"zero ttl":  {Key: "idem:k", Fingerprint: "fp"},
	} {
		b, err := s.Begin(t.Context(), a)
		if !errors.Is(err, httpidem.ErrInvalidArgument) {
			t.Errorf("%s: Begin = %+v, %v; want ErrInvalidArgument", name, b, err)
		}
		if errors.Is(err, core.ErrNotAcquired) {
			t.Errorf("%s: bad input reported as contention: %v", name, err)
		}
		if b.Lease != nil {
			_ = b.Lease.Release(t.Context())
		}
	}
}

func testOneLease(t *testing.T, s httpidem.IdempotencyStore) {
	const n = 16
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases []httpidem.Lease
		errs   []error
	)
	for range n {
		wg.Go(func() {
			b, err := s.Begin(t.Context(), beginArgs("race", "fp"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case b.Lease != nil:
				leases = append(leases, b.Lease)
			}
		})
	}
	wg.Wait()
	for _, l := range leases {
		_ = l.Release(t.Context())
	}
	if len(errs) > 0 || len(leases) != 1 {
		t.Fatalf("%d concurrent Begins: %d leases, errors %v; want exactly one lease", n, len(leases), errs)
	}
}
