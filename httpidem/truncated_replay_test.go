package httpidem_test

import (
	"bufio"
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

// The client of the first request hangs up while the handler writes its
// (large, ordinary) body; the handler, as most do, ignores Write errors.
// The capture kept p[:n] of each failed Write and stored the prefix as a
// whole response: the retry got a truncated body with a matching
// Content-Length and Idempotent-Replayed: true (review 14). A response not
// sent whole is not stored now: the retry runs the handler again.
func TestTruncatedResponseNotReplayed(t *testing.T) {
	store := must(httpidem.NewMemoryStore())
	defer store.Close()
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	const chunks = 24 // 768 KiB < MaxResponseBody (1 MiB)
	var runs, failed atomic.Int32
	done := make(chan struct{})
	h := httpidem.Idempotency(httpidem.IdempotencyConfig{Store: store, Principal: tenant})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				defer close(done)
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusCreated)
			for i := 0; i < chunks; i++ {
				if _, err := w.Write(chunk); err != nil {
					failed.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	// First request: read the status line, then reset the connection.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\nX-Tenant: t1\r\nContent-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	line, _ := br.ReadString('\n')
	t.Logf("first: %q", line)
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	<-done
	time.Sleep(50 * time.Millisecond)
	t.Logf("handler runs=%d, failed writes=%d", runs.Load(), failed.Load())

	// The retry.
	req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader([]byte("{}")))
	req.Header.Set("Idempotency-Key", "k1")
	req.Header.Set("X-Tenant", "t1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("retry: status %d, replayed %q, Content-Length %q, read %d bytes (err %v)",
		resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Content-Length"), len(body), err)
	if resp.Header.Get("Idempotent-Replayed") == "true" && len(body) != chunks*len(chunk) {
		t.Fatalf("replayed a truncated response as complete: %d of %d bytes, status %d", len(body), chunks*len(chunk), resp.StatusCode)
	}
	if failed.Load() == 0 {
		t.Fatal("no write of the first run failed: the case under test did not arise")
	}
	if resp.StatusCode != http.StatusCreated || len(body) != chunks*len(chunk) {
		t.Fatalf("retry: status %d, %d bytes; want the handler run again (201, %d bytes)", resp.StatusCode, len(body), chunks*len(chunk))
	}
}
