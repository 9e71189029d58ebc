package sqltest_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/latchkey/latchkey/httpidem"
)

// This example runs httpidem's ExampleNewSQLStore on SQLite: the order
// and its stored response commit together, so a handler that crashes
// after inserting the order leaves nothing behind, its retry orders once,
// and the next retry is a replay.
func Example() {
	dir, err := os.MkdirTemp("", "sqlstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	ctx := context.Background()
	store, err := httpidem.NewSQLStore(db, httpidem.WithHandlerTx(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	crash := true
	orders := httpidem.Idempotency(httpidem.IdempotencyConfig{
		Store:     store,
		Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpidem.TxFromContext(r.Context())
		res, err := tx.ExecContext(r.Context(), "INSERT INTO orders (sku) VALUES (?)", r.FormValue("sku"))
		if err != nil {
			http.Error(w, "could not order", http.StatusInternalServerError)
			return
		}
		if crash {
			crash = false
			panic("crash after the insert")
		}
		id, _ := res.LastInsertId()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, id)
	}))

	send := func() {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("sku=42"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Idempotency-Key", "order-7")
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		defer func() {
			if p := recover(); p != nil {
				fmt.Println("handler panicked:", p)
			}
		}()
		orders.ServeHTTP(w, r)
		fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	count := func() {
		var n int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n)
		fmt.Println("orders:", n)
	}
	send()
	count()
	send()
	send()
	count()
	// Output:
	// handler panicked: crash after the insert
	// orders: 0
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// orders: 1
}
