package sqltest_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// shop is an order endpoint whose requests run in a transaction: its
// handler inserts an order through httpidem.TxFromContext and answers
// 201, unless the test's hooks do otherwise.
type shop struct {
	t      testing.TB
	db     *sql.DB
	d      httpidem.Dialect
	store  *httpidem.SQLStore
	idem   string // the store's idempotency table
	orders string // the business table
	h      http.Handler
	runs   atomic.Int64 // handler runs

	// before runs before the order is inserted; then, after it, answers
	// instead of the 201. nil: nothing, 201.
	before atomic.Pointer[func(r *http.Request)]
	then   atomic.Pointer[func(w http.ResponseWriter, r *http.Request)]
}

func newShop(t testing.TB, db *sql.DB, d httpidem.Dialect, leaseTTL time.Duration, configure ...func(*httpidem.IdempotencyConfig)) *shop {
	t.Helper()
	store, idem := newStoreTables(t, db, httpidem.WithHandlerTx(nil), httpidem.WithDialect(d))
	sh := &shop{t: t, db: db, d: d, store: store, idem: idem, orders: tableName(t, db, "orders")}
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE "+sh.orders+
		" (id VARCHAR(64) NOT NULL PRIMARY KEY, body VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + sh.orders + " (id, body) VALUES (" + ph(d, 1) + ", " + ph(d, 2) + ")"
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sh.runs.Add(1)
		tx, ok := httpidem.TxFromContext(r.Context())
		if !ok {
			http.Error(w, "no transaction in the request context", http.StatusInternalServerError)
			return
		}
		if f := sh.before.Load(); f != nil {
			(*f)(r)
		}
		body, _ := io.ReadAll(r.Body)
		id := strings.ToLower(rand.Text()[:12])
		if _, err := tx.ExecContext(r.Context(), insert, id, string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if f := sh.then.Load(); f != nil {
			(*f)(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+id)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%q}`, id)
	})
	cfg := httpidem.IdempotencyConfig{
		Store:     store,
		LeaseTTL:  leaseTTL,
		Principal: func(*http.Request) (string, error) { return "tenant-1", nil },
	}
	for _, f := range configure {
		f(&cfg)
	}
	sh.h = httpidem.Idempotency(cfg)(handler)
	return sh
}

// post sends one order with key; panicked is what the handler panicked
// with, if it did.
func (sh *shop) post(key, body string) (w *httptest.ResponseRecorder, panicked any) {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	w = httptest.NewRecorder()
	defer func() { panicked = recover() }()
	sh.h.ServeHTTP(w, r)
	return w, nil
}

// mustPost posts and fails the test if the handler panicked or the
// status is not want.
func (sh *shop) mustPost(key, body string, want int) *httptest.ResponseRecorder {
	sh.t.Helper()
	w, p := sh.post(key, body)
	if p != nil {
		sh.t.Fatalf("POST %s: handler panicked: %v", key, p)
	}
	if w.Code != want {
		sh.t.Fatalf("POST %s: %d %s, want %d", key, w.Code, w.Body, want)
	}
	return w
}

// state is what the database holds: orders, stored responses, leases.
type state struct{ orders, records, leases int64 }

func (sh *shop) state() state {
	sh.t.Helper()
	return state{
		orders:  count(sh.t, sh.db, "SELECT COUNT(*) FROM "+sh.orders),
		records: count(sh.t, sh.db, "SELECT COUNT(*) FROM "+sh.idem+" WHERE kind = 1"),
		leases:  count(sh.t, sh.db, "SELECT COUNT(*) FROM "+sh.idem+" WHERE kind = 0"),
	}
}

func (sh *shop) wantState(what string, want state) {
	sh.t.Helper()
	if got := sh.state(); got != want {
		sh.t.Fatalf("%s: database holds %+v, want %+v", what, got, want)
	}
}

func (sh *shop) wantRuns(what string, want int64) {
	sh.t.Helper()
	if got := sh.runs.Load(); got != want {
		sh.t.Fatalf("%s: the handler ran %d times, want %d", what, got, want)
	}
}

// deleteLease deletes the key's lease row behind its holder's back, as if
// it had expired and been swept, so that another request can take the
// key while the holder still runs.
func (sh *shop) deleteLease() {
	sh.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// By primary key: a scan would wait, on MySQL, for the locks of the
	// holder's open transaction.
	var key []byte
	if err := sh.db.QueryRowContext(ctx, "SELECT idem_key FROM "+sh.idem+" WHERE kind = 0").Scan(&key); err != nil {
		sh.t.Fatal(err)
	}
	if _, err := sh.db.ExecContext(ctx, "DELETE FROM "+sh.idem+" WHERE idem_key = "+ph(sh.d, 1)+" AND kind = 0", key); err != nil {
		sh.t.Fatal(err)
	}
}

// wantReplay posts key again and checks that the stored response of
// first comes back, without running the handler.
func (sh *shop) wantReplay(key, body string, first *httptest.ResponseRecorder) {
	sh.t.Helper()
	runs := sh.runs.Load()
	w := sh.mustPost(key, body, first.Code)
	if w.Header().Get(httpidem.HeaderReplayed) != "true" || w.Body.String() != first.Body.String() ||
		w.Header().Get("Location") != first.Header().Get("Location") {
		sh.t.Fatalf("retry of %s: %d %q %v, want the replay of %q %v", key, w.Code, w.Body, w.Header(), first.Body, first.Header())
	}
	sh.wantRuns("after a replay", runs)
}

// wantProblem checks a problem answer's status and code.
func wantProblem(t testing.TB, w *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	if w.Code != status || !strings.Contains(w.Body.String(), strconv.Quote(code)) {
		t.Fatalf("answer %d %s, want %d with code %q", w.Code, w.Body, status, code)
	}
}
