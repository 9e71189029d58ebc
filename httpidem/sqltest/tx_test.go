package sqltest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// TestTxCommitsTogether: the order and the stored response commit in one
// transaction; the retry replays it without running the handler.
func TestTxCommitsTogether(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		sh := newShop(t, d.open(t), d.dialect, 10*time.Second)
		first := sh.mustPost("k1", "kettle", http.StatusCreated)
		if ct := first.Header().Get("Content-Type"); ct != "application/json" || !strings.Contains(first.Body.String(), `"order"`) {
			t.Fatalf("first answer: %v %s", first.Header(), first.Body)
		}
		sh.wantState("after the first request", state{orders: 1, records: 1, leases: 0})
		sh.wantReplay("k1", "kettle", first)
		w, _ := sh.post("k1", "teapot")
		wantProblem(t, w, http.StatusUnprocessableEntity, httpidem.CodeKeyReused)
		sh.wantRuns("after a replay and a mismatch", 1)
		sh.wantState("after a replay and a mismatch", state{orders: 1, records: 1, leases: 0})
	})
}

// TestTxPanicRollsBack: a handler that panics after inserting the order
// leaves neither the order nor a response, and gives the key up at once;
// the retry runs the handler once more, and only once.
func TestTxPanicRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		sh := newShop(t, d.open(t), d.dialect, 10*time.Second)
		boom := func(http.ResponseWriter, *http.Request) { panic("crash after the order was inserted") }
		sh.then.Store(&boom)
		if _, p := sh.post("k1", "kettle"); p == nil {
			t.Fatal("the handler's panic did not reach the server")
		}
		sh.wantState("after the panic", state{})
		sh.then.Store(nil)
		first := sh.mustPost("k1", "kettle", http.StatusCreated)
		sh.wantRuns("after the retry", 2)
		sh.wantState("after the retry", state{orders: 1, records: 1})
		sh.wantReplay("k1", "kettle", first)
	})
}

// TestTx5xxRollsBack: a 5xx answer is sent, but its writes are rolled
// back and the key is given up, so the retry runs for real.
func TestTx5xxRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		sh := newShop(t, d.open(t), d.dialect, 10*time.Second)
		fail := func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "payment provider down", http.StatusBadGateway)
		}
		sh.then.Store(&fail)
		w := sh.mustPost("k1", "kettle", http.StatusBadGateway)
		if !strings.Contains(w.Body.String(), "payment provider down") {
			t.Fatalf("the handler's own 502 was not sent: %s", w.Body)
		}
		sh.wantState("after the 502", state{})
		sh.then.Store(nil)
		sh.mustPost("k1", "kettle", http.StatusCreated)
		sh.wantRuns("after the retry", 2)
		sh.wantState("after the retry", state{orders: 1, records: 1})
	})
}

// TestTxCrashBeforeCommit: the connection dies before COMMIT reaches the
// database (as when the process dies there). The client is not told of
// an order; nothing is committed; the key stays in flight until its lease
// expires — the COMMIT's fate is not known to the middleware — and then
// the retry runs the handler once, and only once.
func TestTxCrashBeforeCommit(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db, f := d.openFaulty(t)
		const leaseTTL = 500 * time.Millisecond
		sh := newShop(t, db, d.dialect, leaseTTL)
		f.failNextCommit(commitNever)
		w := sh.mustPost("k1", "kettle", http.StatusServiceUnavailable)
		wantProblem(t, w, http.StatusServiceUnavailable, httpidem.CodeUnavailable)
		if ra := w.Header().Get("Retry-After"); ra != "1" {
			t.Fatalf("Retry-After %q, want the lease's TTL rounded up, 1", ra)
		}
		sh.wantState("after the failed commit", state{leases: 1})
		w, _ = sh.post("k1", "kettle")
		wantProblem(t, w, http.StatusConflict, httpidem.CodeInFlight)
		time.Sleep(leaseTTL + 100*time.Millisecond) // until the lease has expired
		first := sh.mustPost("k1", "kettle", http.StatusCreated)
		sh.wantRuns("after the retry", 2)
		sh.wantState("after the retry", state{orders: 1, records: 1})
		sh.wantReplay("k1", "kettle", first)
	})
}

// TestTxCommitAnswerLost: the COMMIT happens but its answer is lost. The
// middleware finds the response committed under its lease and sends it.
func TestTxCommitAnswerLost(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db, f := d.openFaulty(t)
		sh := newShop(t, db, d.dialect, 10*time.Second)
		f.failNextCommit(commitAnswerLost)
		first := sh.mustPost("k1", "kettle", http.StatusCreated)
		sh.wantState("after the commit", state{orders: 1, records: 1})
		sh.wantReplay("k1", "kettle", first)
	})
}

// TestTxDeposedBeforeWriting: a request whose lease is lost before it
// writes (it paused past its TTL, and another request took the key)
// cannot commit after the usurper did: the order exists once, and the
// deposed request's client is told to retry, which replays.
func TestTxDeposedBeforeWriting(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db := d.open(t)
		if d.driver == "sqlite" {
			// An immediate transaction holds SQLite's one write lock from
			// its start, so the usurper could not run beside the paused
			// request: begin deferred ones here.
			db = d.openDSN(t, strings.Replace(d.dsn(t), "&_txlock=immediate", "", 1))
		}
		sh := newShop(t, db, d.dialect, 30*time.Second)
		entered, resume := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		pauseFirst := func(*http.Request) {
			if once.CompareAndSwap(false, true) {
				close(entered)
				<-resume
			}
		}
		sh.before.Store(&pauseFirst)
		deposed := make(chan *httptest.ResponseRecorder)
		go func() {
			w, _ := sh.post("k1", "kettle")
			deposed <- w
		}()
		<-entered
		sh.deleteLease()
		usurper := sh.mustPost("k1", "kettle", http.StatusCreated)
		close(resume)
		wantProblem(t, <-deposed, http.StatusServiceUnavailable, httpidem.CodeLockLost)
		sh.wantRuns("after both", 2)
		sh.wantState("after both", state{orders: 1, records: 1})
		sh.wantReplay("k1", "kettle", usurper)
	})
}

// TestTxDeposedWhileCommitting: a request whose lease is lost after it
// stored its response, before its COMMIT: the request that took the key
// over runs, but its own response row collides with the first one's, so
// it rolls back — whichever of the two reaches the row first. The order
// exists once. (Not on SQLite: the first's open write transaction holds
// the one write lock, so no request can take the key over meanwhile.)
func TestTxDeposedWhileCommitting(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		if d.driver == "sqlite" {
			t.Skip("SQLite has one writer: a key cannot be taken over during a write transaction")
		}
		db, f := d.openFaulty(t)
		sh := newShop(t, db, d.dialect, 30*time.Second)
		committing, resume := make(chan struct{}), make(chan struct{})
		f.holdNextCommit(func() {
			close(committing)
			<-resume
		})
		firstDone := make(chan *httptest.ResponseRecorder)
		go func() {
			w, _ := sh.post("k1", "kettle")
			firstDone <- w
		}()
		<-committing
		sh.deleteLease()
		ran := make(chan struct{})
		signal := func(w http.ResponseWriter, _ *http.Request) {
			close(ran)
			w.WriteHeader(http.StatusCreated)
		}
		sh.then.Store(&signal)
		secondDone := make(chan *httptest.ResponseRecorder)
		go func() {
			w, _ := sh.post("k1", "kettle")
			secondDone <- w
		}()
		<-ran // the usurper inserted its order; its response row waits on, or meets, the first's
		close(resume)
		first := <-firstDone
		if first.Code != http.StatusCreated {
			t.Fatalf("first request: %d %s, want 201: its commit went through", first.Code, first.Body)
		}
		wantProblem(t, <-secondDone, http.StatusServiceUnavailable, httpidem.CodeLockLost)
		sh.wantRuns("after both", 2)
		sh.wantState("after both", state{orders: 1, records: 1})
		sh.wantReplay("k1", "kettle", first)
	})
}

// TestTxLeaseLostRollsBack: a lease lost while its handler runs rolls the
// transaction back at once (the request context is cancelled too); the
// client gets 503 lock_lost and nothing is committed. On SQLite nobody
// can write while the transaction holds the write lock, renewals
// included, so the lease is lost at its belief deadline; on the servers
// a renewal finds the lease row gone.
func TestTxLeaseLostRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		sh := newShop(t, d.open(t), d.dialect, 400*time.Millisecond)
		inserted := make(chan struct{})
		wait := func(w http.ResponseWriter, r *http.Request) {
			close(inserted)
			<-r.Context().Done()
			w.WriteHeader(http.StatusCreated) // too late: it must not be committed
		}
		sh.then.Store(&wait)
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			w, _ := sh.post("k1", "kettle")
			done <- w
		}()
		<-inserted
		sh.deleteLease()
		wantProblem(t, <-done, http.StatusServiceUnavailable, httpidem.CodeLockLost)
		sh.wantState("after the loss", state{})
		sh.then.Store(nil)
		sh.mustPost("k1", "kettle", http.StatusCreated)
		sh.wantState("after the retry", state{orders: 1, records: 1})
	})
}

// TestTxResponseHeld: the response of a request in a transaction is sent
// once committed, as it was at WriteHeader — a Flush sends nothing early
// and does not stop it being stored — and replays byte for byte.
func TestTxResponseHeld(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		sh := newShop(t, d.open(t), d.dialect, 10*time.Second)
		var sawEarly atomic.Bool
		answer := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte("queued "))
			http.NewResponseController(w).Flush()
			if rec, ok := unwrapRecorder(w); ok && rec.Flushed {
				sawEarly.Store(true)
			}
			w.Header().Set("X-Too-Late", "1") // after WriteHeader: not sent
			_, _ = w.Write([]byte("order"))
		}
		sh.then.Store(&answer)
		first := sh.mustPost("k1", "kettle", http.StatusAccepted)
		if sawEarly.Load() {
			t.Fatal("Flush sent the response before the commit")
		}
		if first.Body.String() != "queued order" || first.Header().Get("X-Too-Late") != "" || first.Header().Get("Content-Type") != "text/plain" {
			t.Fatalf("sent %v %q", first.Header(), first.Body)
		}
		sh.wantState("after the request", state{orders: 1, records: 1})
		sh.wantReplay("k1", "kettle", first)
	})
}

// unwrapRecorder finds the httptest.ResponseRecorder under w.
func unwrapRecorder(w http.ResponseWriter) (*httptest.ResponseRecorder, bool) {
	for {
		if rec, ok := w.(*httptest.ResponseRecorder); ok {
			return rec, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil, false
		}
		w = u.Unwrap()
	}
}

// TestTxResponseTooLarge: a 2xx response too large to store cannot be
// committed without its record, so it is rolled back and answered 500.
func TestTxResponseTooLarge(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		sh := newShop(t, d.open(t), d.dialect, 10*time.Second,
			func(c *httpidem.IdempotencyConfig) { c.MaxResponseBody = 16 })
		big := func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(strings.Repeat("x", 17)))
		}
		sh.then.Store(&big)
		w := sh.mustPost("k1", "kettle", http.StatusInternalServerError)
		wantProblem(t, w, http.StatusInternalServerError, httpidem.CodeNotStorable)
		sh.wantState("after the request", state{})
	})
}
