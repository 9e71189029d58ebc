package admin_test

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/latchkey/latchkey/admin"
	"github.com/latchkey/latchkey/core"
)

// This example mounts the admin page as net/http/pprof is mounted and
// reads its JSON API: who holds which key.
func ExampleHandler() {
	locks, err := core.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()
	lk, err := locks.TryLock(ctx, "report:daily", core.WithMetadata("worker-3"))
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Release(ctx)

	mux := http.NewServeMux()
	mux.Handle("/debug/latchkey/", admin.Handler(locks)) // read-only; wrap it in your authentication

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/debug/latchkey/api/locks", nil))
	var got struct {
		Locks []struct {
			Key   string
			Type  string
			Holds []struct{ Metadata string }
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		log.Fatal(err)
	}
	for _, p := range got.Locks {
		fmt.Println(p.Key, p.Type, p.Holds[0].Metadata)
	}
	// Output:
	// report:daily lock worker-3
}

// This example puts the admin page behind the host's authentication — a
// shared secret here; use your own middleware (SSO, mTLS, an admin role)
// — with force release enabled and a Recorder for recent losses.
func ExampleHandler_authentication() {
	rec := admin.NewRecorder(100, nil) // keeps the last 100 losses of this process
	locks, err := core.NewMemory(core.WithObserver(rec))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	requireOperator := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, ok := r.BasicAuth()
			if !ok || user != "ops" || subtle.ConstantTimeCompare([]byte(pass), []byte("s3cret")) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="latchkey"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/latchkey/", requireOperator(admin.Handler(locks, admin.WithWrites(), admin.WithRecorder(rec))))

	for _, auth := range []bool{false, true} {
		r := httptest.NewRequest("GET", "/debug/latchkey/", nil)
		if auth {
			r.SetBasicAuth("ops", "s3cret")
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// 401
	// 200
}
