package httpidem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/httpidem"
)

// leaseKeys returns the in-flight lease keys in mr: "<prefix>:{idem:...}".
func leaseKeys(mr *miniredis.Miniredis) []string {
	var keys []string
	for _, k := range mr.Keys() {
		if strings.Contains(k, ":{idem:") && strings.HasSuffix(k, "}") {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestLostLeaseCancelsRequest(t *testing.T) {
	mr, rdb := startMiniredis(t, false)
	store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
	defer store.Close()
	var d decisions
	var runs atomic.Int64
	started := make(chan struct{}, 2)
	causes := make(chan error, 2)
	h := mw(t, httpidem.IdempotencyConfig{Store: store, LeaseTTL: 300 * time.Millisecond, OnDecision: d.record},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) > 1 {
				w.WriteHeader(http.StatusCreated)
				return
			}
			started <- struct{}{}
			select {
			case <-r.Context().Done():
				causes <- context.Cause(r.Context())
			case <-time.After(10 * time.Second):
				causes <- errors.New("not cancelled")
			}
			w.WriteHeader(http.StatusCreated)
		}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(h, "POST", "/x", "b", withKey("k"), withTenant("A"))
	}()
	<-started
	keys := leaseKeys(mr)
	if len(keys) != 1 {
		t.Fatalf("lease keys %v", mr.Keys())
	}
	mr.Del(keys[0]) // the lease vanishes (a failover that lost it, say)
	if cause := <-causes; !errors.Is(cause, httpidem.ErrLost) {
		t.Fatalf("request context cause %v, want ErrLeaseLost", cause)
	}
	<-done
	got := d.outcomes()
	if len(got) != 2 || got[1] != httpidem.OutcomeLost {
		t.Fatalf("decisions %v, want first then lease_lost", got)
	}
	// Nothing was stored: the retry runs.
	if w := do(h, "POST", "/x", "b", withKey("k"), withTenant("A")); w.Header().Get(httpidem.HeaderReplayed) != "" || runs.Load() != 2 {
		t.Fatalf("retry after a lost lease: replayed=%q runs=%d", w.Header().Get(httpidem.HeaderReplayed), runs.Load())
	}
}

func TestLeaseRenewedWhileHandlerRuns(t *testing.T) {
	_, rdb := startMiniredis(t, true) // keys age in real time
	store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
	defer store.Close()
	const ttl = 600 * time.Millisecond
	started, release := make(chan struct{}), make(chan struct{})
	var ctxErr atomic.Value
	h := mw(t, httpidem.IdempotencyConfig{Store: store, LeaseTTL: ttl}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		if err := r.Context().Err(); err != nil {
			ctxErr.Store(err)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(h, "POST", "/x", "b", withKey("k"), withTenant("A"))
	}()
	<-started
	time.Sleep(4 * ttl) // well past the TTL: only renewal keeps the lease
	problem(t, do(h, "POST", "/x", "b", withKey("k"), withTenant("A")), http.StatusConflict, httpidem.CodeInFlight)
	close(release)
	<-done
	if err := ctxErr.Load(); err != nil {
		t.Fatalf("handler context ended: %v", err)
	}
	if w := do(h, "POST", "/x", "b", withKey("k"), withTenant("A")); w.Header().Get(httpidem.HeaderReplayed) != "true" {
		t.Fatalf("no replay after a long handler: %d", w.Code)
	}
}

// slowBegin signals when Begin is entered.
type slowBegin struct {
	testStore
	entered chan struct{}
}

func (s slowBegin) Begin(ctx context.Context, a httpidem.BeginArgs) (httpidem.Begun, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	return s.testStore.Begin(ctx, a)
}

func TestWaitInFlightReplays(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		entered := make(chan struct{}, 1)
		started, release := make(chan struct{}), make(chan struct{})
		var runs atomic.Int64
		h := mw(t, httpidem.IdempotencyConfig{Store: slowBegin{store, entered}, WaitInFlight: 10 * time.Second},
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				close(started)
				<-release
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte("done"))
			}))
		firstDone := make(chan struct{})
		go func() {
			defer close(firstDone)
			do(h, "POST", "/x", "b", withKey("k"), withTenant("A"))
		}()
		<-started
		<-entered // the first request's Begin
		second := make(chan *httptest.ResponseRecorder, 1)
		go func() { second <- do(h, "POST", "/x", "b", withKey("k"), withTenant("A")) }()
		<-entered
		time.Sleep(50 * time.Millisecond) // let it reach the wait
		close(release)
		w := <-second
		<-firstDone
		if w.Code != http.StatusCreated || w.Body.String() != "done" || w.Header().Get(httpidem.HeaderReplayed) != "true" || runs.Load() != 1 {
			t.Fatalf("waiter got %d %q replayed=%q, runs %d", w.Code, w.Body, w.Header().Get(httpidem.HeaderReplayed), runs.Load())
		}
	})
}

func TestLateCompleteKeepsNewerRecord(t *testing.T) {
	mr, rdb := startMiniredis(t, false)
	store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(prefix(t))))
	defer store.Close()
	ctx := context.Background()
	args := httpidem.BeginArgs{Key: "idem:k", Fingerprint: "fp", LeaseTTL: 30 * time.Second}
	a, err := store.Begin(ctx, args)
	if err != nil || a.Lease == nil {
		t.Fatalf("A: %+v %v", a, err)
	}
	mr.Del(leaseKeys(mr)[0]) // A's lease is gone and A has not noticed yet
	b, err := store.Begin(ctx, args)
	if err != nil || b.Lease == nil {
		t.Fatalf("B: %+v %v", b, err)
	}
	if err := b.Lease.Complete(ctx, &httpidem.Record{Fingerprint: "fp", Status: 201, Body: []byte("B")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	err = a.Lease.Complete(ctx, &httpidem.Record{Fingerprint: "fp", Status: 201, Body: []byte("A")}, time.Hour)
	if !errors.Is(err, httpidem.ErrLost) {
		t.Fatalf("late Complete: %v, want ErrLeaseLost", err)
	}
	c, err := store.Begin(ctx, args)
	if err != nil || c.Record == nil || string(c.Record.Body) != "B" {
		t.Fatalf("record after the late write: %+v %v", c, err)
	}
}

func TestStoreDown(t *testing.T) {
	store := must(httpidem.NewRedisStore(deadRedis(t), httpidem.WithKeyPrefix(prefix(t))))
	defer store.Close()
	var d decisions
	var c counter
	closed := mw(t, httpidem.IdempotencyConfig{Store: store, OnDecision: d.record}, &c)
	problem(t, do(closed, "POST", "/x", "b", withKey("k"), withTenant("A")), http.StatusServiceUnavailable, httpidem.CodeUnavailable)
	open := mw(t, httpidem.IdempotencyConfig{Store: store, FailOpen: true, OnDecision: d.record}, &c)
	if w := do(open, "POST", "/x", "body", withKey("k"), withTenant("A")); w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"echo":"body"`) {
		t.Fatalf("fail open: %d %s", w.Code, w.Body)
	}
	for i, x := range d.got {
		if x.Outcome != httpidem.OutcomeStoreError || !errors.Is(x.Err, httpidem.ErrUnavailable) {
			t.Fatalf("decision %d: %+v", i, x)
		}
	}
	if d.got[0].Status != http.StatusServiceUnavailable || d.got[1].Status != 0 {
		t.Fatalf("decision statuses %d, %d", d.got[0].Status, d.got[1].Status)
	}
}
