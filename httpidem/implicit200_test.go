package httpidem_test

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

// Review 24: a handler that completes its work (a side effect it does not
// abandon: it never looks at its context) and answers the implicit empty
// 200 — a legitimate net/http answer — while its client has hung up (the
// very case in which a client retries with the same Idempotency-Key).
// bfb7051 took "wrote nothing + client gone" for "gave up" and stored
// nothing, so the retry ran the side effect again; outside a handler
// transaction the 200 is stored again (the doc says a handler that gives
// up should answer an error).
func TestCompletedImplicit200StoredWhenClientGone(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	var runs, effects atomic.Int32
	started, clientGone, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: tenant})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				defer close(done)
				close(started)
				<-clientGone                      // slow work; the client times out meanwhile
				time.Sleep(50 * time.Millisecond) // the server notices the hang-up
				effects.Add(1)                    // the work completes
				return                            // implicit 200, empty body: "done"
			}
			effects.Add(1)
		}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k24\r\nX-Tenant: t1\r\nContent-Length: 2\r\n\r\n{}")
	<-started
	conn.Close()
	close(clientGone)
	<-done
	time.Sleep(50 * time.Millisecond) // the first request's finish

	req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader([]byte("{}")))
	req.Header.Set("Idempotency-Key", "k24")
	req.Header.Set("X-Tenant", "t1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("retry: %d %q, replayed %q, handler runs %d, side effects %d", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"), runs.Load(), effects.Load())
	if effects.Load() != 1 {
		t.Fatalf("the side effect ran %d times under one Idempotency-Key: the completed implicit-200 answer was not stored because the client had gone", effects.Load())
	}
}
