package httpidem_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// user reads the subject from X-User.
func user(r *http.Request) (string, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, nil
	}
	return "", errors.New("not logged in")
}

func withUser(u string) reqOpt { return withHeader("X-User", u) }

// voteMux routes POST /vote/{item} through the Daily middleware to h.
func voteMux(t *testing.T, cfg httpidem.DailyConfig, h http.HandlerFunc) http.Handler {
	t.Helper()
	if cfg.Subject == nil {
		cfg.Subject = user
	}
	if cfg.Object == nil {
		cfg.Object = func(r *http.Request) (string, error) {
			if item := r.PathValue("item"); item != "bad" {
				return item, nil
			}
			return "", errors.New("no such item")
		}
	}
	m, err := cfg.ToMiddleware()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /vote/{item}", m(h))
	return mux
}

func ok(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "voted") }

func TestDailyGate(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		loc := mustZone(t, "Europe/Berlin")
		now := time.Now().Truncate(time.Second)
		var d decisions
		h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "vote", Location: loc, Clock: func() time.Time { return now }, OnDecision: d.record},
			func(w http.ResponseWriter, r *http.Request) {
				tk, found := httpidem.TicketFromContext(r.Context())
				if !found || !tk.First || tk.Day != httpidem.DayOf(now, loc) {
					t.Errorf("handler ticket %+v %v", tk, found)
				}
				ok(w, r)
			})
		if w := do(h, "POST", "/vote/9", "", withUser("u1")); w.Code != http.StatusOK || w.Body.String() != "voted" {
			t.Fatalf("first vote: %d %s", w.Code, w.Body)
		}
		w := do(h, "POST", "/vote/9", "", withUser("u1"))
		problem(t, w, http.StatusConflict, httpidem.CodeAlreadyClaimed)
		until := httpidem.DayOf(now, loc).End(loc)
		if ra := w.Header().Get("Retry-After"); ra != strconv.Itoa(int(until.Sub(now).Seconds())) {
			t.Fatalf("Retry-After %q, want %v until local midnight", ra, until.Sub(now))
		}
		for _, other := range []reqOpt{withUser("u2")} {
			if w := do(h, "POST", "/vote/9", "", other); w.Code != http.StatusOK {
				t.Fatalf("another user: %d", w.Code)
			}
		}
		if w := do(h, "POST", "/vote/10", "", withUser("u1")); w.Code != http.StatusOK {
			t.Fatalf("another item: %d", w.Code)
		}
		problem(t, do(h, "POST", "/vote/9", ""), http.StatusUnauthorized, httpidem.CodeUnauthenticated)
		problem(t, do(h, "POST", "/vote/bad", "", withUser("u1")), http.StatusBadRequest, httpidem.CodeInvalidRequest)
		want := []httpidem.Outcome{"first", "duplicate", "first", "first", "unauthenticated", "invalid"}
		got := d.outcomes()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("decisions %v, want %v", got, want)
		}
		for _, x := range d.got {
			if x.Kind != httpidem.KindDaily || x.Scope != "vote" {
				t.Fatalf("decision %+v", x)
			}
		}
	})
}

func TestDailyDuplicateHandler(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	dup := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tk, _ := httpidem.TicketFromContext(r.Context())
		fmt.Fprintf(w, "already checked in on %s", tk.Day)
	})
	h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "checkin", DuplicateHandler: dup,
		Object: func(*http.Request) (string, error) { return "", nil }}, ok)
	do(h, "POST", "/vote/x", "", withUser("u1"))
	w := do(h, "POST", "/vote/y", "", withUser("u1")) // no object: one check-in a day
	today := httpidem.DayOf(time.Now(), nil)
	if w.Code != http.StatusOK || w.Body.String() != "already checked in on "+today.String() {
		t.Fatalf("duplicate: %d %q", w.Code, w.Body)
	}
}

func TestDailyReleasesOnFailure(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		var d decisions
		runs := 0
		h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "vote", OnDecision: d.record}, func(w http.ResponseWriter, r *http.Request) {
			runs++
			switch runs {
			case 1:
				http.Error(w, "db down", http.StatusInternalServerError)
			case 2:
				panic("boom")
			default:
				ok(w, r)
			}
		})
		if w := do(h, "POST", "/vote/9", "", withUser("u1")); w.Code != http.StatusInternalServerError {
			t.Fatalf("failing handler: %d", w.Code)
		}
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			do(h, "POST", "/vote/9", "", withUser("u1"))
		}()
		if w := do(h, "POST", "/vote/9", "", withUser("u1")); w.Code != http.StatusOK {
			t.Fatalf("after two failures the vote is refused: %d", w.Code)
		}
		problem(t, do(h, "POST", "/vote/9", "", withUser("u1")), http.StatusConflict, httpidem.CodeAlreadyClaimed)
		want := "[first released first released first duplicate]"
		if got := fmt.Sprint(d.outcomes()); got != want {
			t.Fatalf("decisions %s, want %s", got, want)
		}
	})
	// ReleaseOn widens what counts as failure.
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "vote", ReleaseOn: func(s int) bool { return s >= 400 }},
		func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad ballot", http.StatusBadRequest) })
	for i := 0; i < 2; i++ {
		if w := do(h, "POST", "/vote/9", "", withUser("u1")); w.Code != http.StatusBadRequest {
			t.Fatalf("attempt %d: %d, want the handler's 400 (claim released)", i, w.Code)
		}
	}
}

func TestDailyCountMode(t *testing.T) {
	eachBackend(t, func(t *testing.T, store testStore) {
		var d decisions
		h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "read", Mode: httpidem.ModeCount, OnDecision: d.record},
			func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-User") == "u4" {
					http.NotFound(w, r)
					return
				}
				ok(w, r)
			})
		for _, u := range []string{"u1", "u2", "u1", "u3", "u2", "u1", "u4"} {
			w := do(h, "POST", "/vote/article-7", "", withUser(u))
			if u != "u4" && w.Code != http.StatusOK {
				t.Fatalf("count mode blocked %s: %d", u, w.Code)
			}
		}
		n, err := store.Count(t.Context(), "read", "article-7", httpidem.DayOf(time.Now(), nil))
		if err != nil || n != 3 {
			t.Fatalf("Count = %d, %v; want 3 distinct readers (u4's 404 not counted)", n, err)
		}
		if got := fmt.Sprint(d.outcomes()); got != "[first first duplicate first duplicate duplicate]" {
			t.Fatalf("decisions %s", got)
		}
	})
}

func TestDailyStoreDown(t *testing.T) {
	store := must(httpidem.NewRedisStore(deadRedis(t), httpidem.WithKeyPrefix(prefix(t))))
	defer store.Close()
	closed := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "vote"}, ok)
	problem(t, do(closed, "POST", "/vote/9", "", withUser("u1")), http.StatusServiceUnavailable, httpidem.CodeUnavailable)
	open := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "vote", FailOpen: true}, ok)
	if w := do(open, "POST", "/vote/9", "", withUser("u1")); w.Code != http.StatusOK {
		t.Fatalf("fail open: %d", w.Code)
	}
}

func TestDailyConfigErrors(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	for _, cfg := range []httpidem.DailyConfig{
		{Store: store, Scope: "vote"}, // no Subject
		{Store: store, Subject: user},
		{Scope: "vote", Subject: user},
	} {
		if _, err := cfg.ToMiddleware(); !errors.Is(err, httpidem.ErrInvalidConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
		// The constructor panics at start-up, never a 500 per request.
		mustPanic(t, httpidem.ErrInvalidConfig, func() { httpidem.Daily(cfg) })
	}
}

func TestDailyPerRequestLocation(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	// 2026-03-01 23:30 UTC is already March 2 in Tokyo.
	now := utc("2026-03-01T23:30:00Z")
	var days []string
	h := voteMux(t, httpidem.DailyConfig{Store: store, Scope: "checkin", Clock: func() time.Time { return now },
		LocationFor: func(r *http.Request) (*time.Location, error) {
			if z := r.Header.Get("X-Zone"); z != "" {
				return time.LoadLocation(z)
			}
			return nil, nil
		}}, func(w http.ResponseWriter, r *http.Request) {
		tk, _ := httpidem.TicketFromContext(r.Context())
		days = append(days, tk.Day.String())
	})
	do(h, "POST", "/vote/x", "", withUser("u1"))
	do(h, "POST", "/vote/x", "", withUser("u1"), withHeader("X-Zone", "Asia/Tokyo"))
	problem(t, do(h, "POST", "/vote/x", "", withUser("u1"), withHeader("X-Zone", "Mars/Olympus")), http.StatusBadRequest, httpidem.CodeInvalidRequest)
	if fmt.Sprint(days) != "[2026-03-01 2026-03-02]" {
		t.Fatalf("days %v", days)
	}
}
