package sqltest_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// review23: bfb7051 made a handler that wrote nothing once its client had
// gone not stored (the retry runs it) — but only outside a transaction.
// Through a SQLStore made WithHandlerTx the same handler's implicit empty
// 200 was committed and stored, and every retry got it as the replay,
// though the handler never did its work. Its transaction is rolled back
// now, and nothing stored.
func TestReview23GaveUpHandlerInTxReplayed(t *testing.T) {
	d := databases[0] // sqlite
	db := d.open(t)
	store := newStore(t, db, httpidem.WithHandlerTx(nil), httpidem.WithDialect(d.dialect))
	var runs atomic.Int32
	started, done := make(chan struct{}), make(chan struct{})
	h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store,
		Principal: func(*http.Request) (string, error) { return "t1", nil }})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				defer close(done)
				close(started)
				<-r.Context().Done() // the work waits on something; the client leaves
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "done")
		}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k2\r\nContent-Length: 2\r\n\r\n{}")
	<-started
	conn.Close()
	<-done
	time.Sleep(200 * time.Millisecond) // the first request's finish

	req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader([]byte("{}")))
	req.Header.Set("Idempotency-Key", "k2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("retry: %d %q, replayed %q, handler runs %d", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"), runs.Load())
	if resp.StatusCode != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("the retry got %d %q (replayed %q): the handler that gave up was stored as an empty 200 in the transactional path",
			resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
}
