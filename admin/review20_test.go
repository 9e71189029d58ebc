package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/admin"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
)

// Review 20. The package doc says the handler "works under any path (with
// or without http.StripPrefix)", but ServeHTTP routed on the last "/api/"
// or "/static/" anywhere in the URL path: mounted (without StripPrefix)
// under a path that contains either, its page was answered 404.
func TestR20PageUnderAPIOrStaticMount(t *testing.T) {
	_, rdb := redistest.Miniredis(t, true)
	c := mustNew(core.NewRedis(rdb))
	t.Cleanup(func() { c.Close() })
	for _, mount := range []string{"/api/latchkey/", "/ops/static/latchkey/", "/debug/latchkey/"} {
		mux := http.NewServeMux()
		mux.Handle(mount, admin.Handler(c))
		srv := httptest.NewServer(mux)
		res, body := get(t, srv.URL+mount)
		srv.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("mounted at %s: the page is %d: %s", mount, res.StatusCode, body)
		}
	}
}

// Review 20. The page's Release shows the holds it read from api/key in
// its confirmation and then posted only the key: a holder that took the
// key while the operator read the dialog was evicted instead, though
// nobody confirmed it. The page now posts the tokens it showed (a form
// field "token" each), and only their holds are taken.
func TestR20EvictTakesHolderNotConfirmed(t *testing.T) {
	f := newFixture(t, admin.WithWrites())
	token := pageToken(t, f)
	ctx := context.Background()
	// What the dialog lists: orders/7 held by f.lock.
	_, before := get(t, f.url("api/key?key=orders/7"))
	if !strings.Contains(before, f.lock.Token()) {
		t.Fatalf("api/key: %s", before)
	}
	// Meanwhile the confirmed holder finishes, and another takes the key.
	if err := f.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustNew(f.client.TryLock(ctx, "orders/7", core.WithTTL(30*time.Second)))
	defer b.Release(ctx)
	code, body := post(t, f, token, url.Values{"key": {"orders/7"}, "confirm": {"orders/7"}, "token": {f.lock.Token()}}, nil)
	info, _ := f.client.Inspect(ctx, "orders/7")
	t.Logf("POST api/evict: %d %s; B still holds: %v", code, body, info.Held)
	if code != http.StatusNotFound {
		t.Errorf("POST api/evict of a holder gone: %d, want 404 not_held", code)
	}
	if !info.Held {
		t.Fatalf("the force release confirmed for holder %s evicted holder %s, which took the key after the confirmation (answer %d)",
			f.lock.Token(), b.Token(), code)
	}
}
