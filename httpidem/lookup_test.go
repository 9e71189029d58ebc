package httpidem_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// responseAdmin is what the operator tools use of a store.
type responseAdmin interface {
	LookupResponse(ctx context.Context, principal, key string) (httpidem.StoredResponse, bool, error)
	DeleteResponse(ctx context.Context, principal, key string) (bool, error)
}

var (
	_ responseAdmin = (*httpidem.RedisStore)(nil)
	_ responseAdmin = (*httpidem.MemoryStore)(nil)
)

// TestLookupAndDeleteResponse: LookupResponse finds a stored response
// under its principal only, with its headers and time left; after
// DeleteResponse the same request runs again.
func TestLookupAndDeleteResponse(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		ctx := context.Background()
		adm := store.(responseAdmin)
		var c counter
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, &c)
		if w := do(h, "POST", "/orders", "b", withKey("order-1"), withTenant("A")); w.Code != http.StatusCreated {
			t.Fatalf("first request: %d %s", w.Code, w.Body)
		}
		resp, found, err := adm.LookupResponse(ctx, "A", "order-1")
		if err != nil || !found || resp.Record == nil || resp.InFlight != nil {
			t.Fatalf("LookupResponse: %+v %v %v", resp, found, err)
		}
		if r := resp.Record; r.Status != http.StatusCreated || r.Header.Get("Location") != "/orders/42" || len(r.Body) == 0 {
			t.Errorf("record: %d %v %q", r.Status, r.Header, r.Body)
		}
		if resp.TTL <= 23*time.Hour || resp.TTL > 24*time.Hour {
			t.Errorf("TTL %v, want about the default 24h", resp.TTL)
		}
		if _, found, err := adm.LookupResponse(ctx, "B", "order-1"); found || err != nil {
			t.Errorf("another principal's lookup: found %v, %v", found, err)
		}
		if ok, err := adm.DeleteResponse(ctx, "A", "order-1"); !ok || err != nil {
			t.Fatalf("DeleteResponse: %v %v", ok, err)
		}
		if ok, err := adm.DeleteResponse(ctx, "A", "order-1"); ok || err != nil {
			t.Errorf("DeleteResponse again: %v %v, want false", ok, err)
		}
		if _, found, _ := adm.LookupResponse(ctx, "A", "order-1"); found {
			t.Error("found after the delete")
		}
		if w := do(h, "POST", "/orders", "b", withKey("order-1"), withTenant("A")); w.Code != http.StatusCreated || c.n.Load() != 2 {
			t.Errorf("after the delete: %d, runs %d (want the request run again)", w.Code, c.n.Load())
		}
		for _, bad := range [][2]string{{"", "k"}, {"A", ""}} {
			if _, _, err := adm.LookupResponse(ctx, bad[0], bad[1]); !errors.Is(err, httpidem.ErrInvalidArgument) {
				t.Errorf("LookupResponse(%q, %q): %v", bad[0], bad[1], err)
			}
		}
	})
}

// TestLookupInFlight: a request running with the key is reported.
func TestLookupInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		ctx := context.Background()
		started, finish := make(chan struct{}), make(chan struct{})
		h := mw(t, httpidem.IdempotencyConfig{Store: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-finish
			w.WriteHeader(http.StatusNoContent)
		}))
		done := make(chan struct{})
		go func() {
			defer close(done)
			do(h, "POST", "/slow", "", withKey("slow-1"), withTenant("A"))
		}()
		<-started
		resp, found, err := store.(responseAdmin).LookupResponse(ctx, "A", "slow-1")
		close(finish)
		<-done
		if err != nil || !found || resp.Record != nil || resp.InFlight == nil || resp.InFlight.TTL <= 0 {
			t.Errorf("LookupResponse while in flight: %+v %v %v", resp, found, err)
		}
	})
}
