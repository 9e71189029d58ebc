package sqltest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/latchkey/latchkey/httpidem"
)

// TestEveryFeature: one SQLStore, no Redis, serves every middleware of
// httpidem: Idempotency, a Daily gate that counts, and Daily's Count mode,
// exact and approximate.
func TestEveryFeature(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		s := newStore(t, d.open(t))
		user := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
		send := func(h http.Handler, u, key string) int {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Header.Set("X-User", u)
			if key != "" {
				r.Header.Set("Idempotency-Key", key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}

		idem := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: s, Principal: user})(ok)
		if a, b := send(idem, "u1", "k"), send(idem, "u1", "k"); a != 200 || b != 200 {
			t.Fatalf("idempotency: %d, %d", a, b)
		}

		vote := httpidem.Daily(httpidem.DailyConfig{Store: s, Scope: "vote", Subject: user, Counted: true})(ok)
		for _, c := range []struct {
			user string
			want int
		}{{"u1", 200}, {"u1", 409}, {"u2", 200}} {
			if got := send(vote, c.user, ""); got != c.want {
				t.Fatalf("vote by %s: %d, want %d", c.user, got, c.want)
			}
		}
		for _, approx := range []bool{false, true} {
			scope := fmt.Sprintf("read-%v", approx)
			cfg := httpidem.DailyConfig{Store: s, Scope: scope, Subject: user, Mode: httpidem.ModeCount, Approximate: approx}
			read := httpidem.Daily(cfg)(ok)
			for _, u := range []string{"u1", "u2", "u1", "u3"} {
				if got := send(read, u, ""); got != 200 {
					t.Fatalf("%s by %s: %d", scope, u, got)
				}
			}
			g, err := httpidem.NewGate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := g.Count(t.Context(), "", g.Today()); err != nil || n != 3 {
				t.Fatalf("%s count: %d, %v; want 3", scope, n, err)
			}
		}
		g, err := httpidem.NewGate(httpidem.DailyConfig{Store: s, Scope: "vote", Counted: true})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := g.Count(t.Context(), "", g.Today()); err != nil || n != 2 {
			t.Fatalf("vote count: %d, %v; want 2", n, err)
		}
	})
}
