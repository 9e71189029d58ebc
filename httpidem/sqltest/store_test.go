package sqltest_test

import (
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/httpidem"
)

func beginArgs(key string, ttl time.Duration) httpidem.BeginArgs {
	return httpidem.BeginArgs{Key: "idem:" + key, Fingerprint: "fp", LeaseTTL: ttl}
}

func mustLease(t *testing.T, s *httpidem.SQLStore, a httpidem.BeginArgs) httpidem.Lease {
	t.Helper()
	b, err := s.Begin(t.Context(), a)
	if err != nil || b.Lease == nil {
		t.Fatalf("Begin %s: %+v, %v; want a Lease", a.Key, b, err)
	}
	return b.Lease
}

// TestDetectDialect: the dialect is read from each driver, also through
// a connector that wraps the driver's connections and reports the driver
// itself (sql.OpenDB).
func TestDetectDialect(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		plain, _ := d.openFaulty(t)
		for _, db := range []*sql.DB{d.open(t), plain} {
			s, err := httpidem.NewSQLStore(db)
			if err != nil {
				t.Fatal(err)
			}
			if s.Dialect() != d.dialect {
				t.Fatalf("Dialect() = %v, want %v", s.Dialect(), d.dialect)
			}
		}
	})
}

// TestMigrateTwice: Migrate creates the tables once and then changes
// nothing.
func TestMigrateTwice(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		s := newStore(t, d.open(t))
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
	})
}

// TestLeaseLost: a lease whose row is taken away is reported lost by its
// renewal, and then stores nothing.
func TestLeaseLost(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db := d.open(t)
		s, idem := newStoreTables(t, db)
		l := mustLease(t, s, beginArgs("lost", 300*time.Millisecond))
		if _, err := db.ExecContext(t.Context(), "DELETE FROM "+idem); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("a lease whose row was deleted was not reported lost")
		}
		if err := l.Err(); !errors.Is(err, httpidem.ErrLost) || !errors.Is(err, core.ErrLost) {
			t.Fatalf("Err() = %v, want ErrLost (and core.ErrLost)", err)
		}
		err := l.Complete(t.Context(), &httpidem.Record{Fingerprint: "fp", Status: 201}, time.Minute)
		if !errors.Is(err, httpidem.ErrLost) {
			t.Fatalf("Complete of a lost lease: %v, want ErrLost", err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM "+idem); n != 0 {
			t.Fatalf("a lost lease stored something: %d rows", n)
		}
	})
}

// TestLeaseRenewed: a lease held for several TTLs stays held, and the key
// stays in flight for others.
func TestLeaseRenewed(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		s := newStore(t, d.open(t))
		l := mustLease(t, s, beginArgs("renewed", 300*time.Millisecond))
		time.Sleep(time.Second)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost despite renewal: %v", err)
		}
		b, err := s.Begin(t.Context(), beginArgs("renewed", 300*time.Millisecond))
		if err != nil || b.InFlight == nil {
			t.Fatalf("Begin of a held key: %+v, %v; want InFlight", b, err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCloseReleasesLeases: Close tells the store's leases and frees their
// keys; later Begins fail.
func TestCloseReleasesLeases(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db := d.open(t)
		s, idem := newStoreTables(t, db)
		l := mustLease(t, s, beginArgs("closing", 10*time.Second))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Lost():
		default:
			t.Fatal("Close did not report the lease lost")
		}
		if n := count(t, db, "SELECT COUNT(*) FROM "+idem); n != 0 {
			t.Fatalf("Close left %d lease rows", n)
		}
		if _, err := s.Begin(t.Context(), beginArgs("after", time.Second)); !errors.Is(err, httpidem.ErrUnavailable) {
			t.Fatalf("Begin after Close: %v, want ErrUnavailable", err)
		}
	})
}

// TestExpiredRowsGo: an expired response lets the key run again, expired
// claims count for nothing and claim again, and DeleteExpired deletes
// them all.
func TestExpiredRowsGo(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db := d.open(t)
		s, idem := newStoreTables(t, db)
		ctx := t.Context()
		l := mustLease(t, s, beginArgs("short", 10*time.Second))
		if err := l.Complete(ctx, &httpidem.Record{Fingerprint: "fp", Status: 201}, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		past := httpidem.ClaimArgs{Scope: "vote", Object: "o", Subject: "u1", Day: httpidem.Day{Year: 2026, Month: 3, Day: 14},
			ExpireAt: time.Now().Add(-time.Hour), Token: "t1", Count: httpidem.CountExact}
		for _, subject := range []string{"u1", "u2"} {
			past.Subject = subject
			if _, err := s.Claim(ctx, past); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := s.Count(ctx, "vote", "o", past.Day); err != nil || n != 0 {
			t.Fatalf("Count of expired claims: %d, %v; want 0", n, err)
		}
		if first, err := s.Claim(ctx, past); err != nil || !first {
			t.Fatalf("Claim over an expired claim: %v, %v; want first", first, err)
		}
		time.Sleep(100 * time.Millisecond)
		again := mustLease(t, s, beginArgs("short", 10*time.Second)) // the response expired
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := s.DeleteExpired(ctx)
		if err != nil || n != 3 {
			t.Fatalf("DeleteExpired: %d, %v; want 3 (a response, two claims)", n, err)
		}
		if rows := count(t, db, "SELECT COUNT(*) FROM "+idem); rows != 0 {
			t.Fatalf("%d idempotency rows left", rows)
		}
	})
}

// TestDatabaseClock: expiry follows the database's clock, not the
// client's. MariaDB lets one session move its clock (SET timestamp), so
// a pool of one connection sees the database's time jump while this
// process's does not.
func TestDatabaseClock(t *testing.T) {
	d := databases[2]
	db := d.open(t)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	s := newStore(t, db)
	ctx := t.Context()
	setClock := func(ahead time.Duration) {
		t.Helper()
		q := "SET timestamp = DEFAULT"
		if ahead != 0 {
			q = "SET timestamp = UNIX_TIMESTAMP() + " + itoa(int64(ahead/time.Second))
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = db.Exec("SET timestamp = DEFAULT") })

	l := mustLease(t, s, beginArgs("clock", 10*time.Second))
	if err := l.Complete(ctx, &httpidem.Record{Fingerprint: "fp", Status: 201}, time.Hour); err != nil {
		t.Fatal(err)
	}
	day := httpidem.Day{Year: 2026, Month: 3, Day: 14}
	claim := httpidem.ClaimArgs{Scope: "vote", Subject: "u1", Day: day, ExpireAt: time.Now().Add(time.Hour), Token: "t1"}
	if first, err := s.Claim(ctx, claim); err != nil || !first {
		t.Fatalf("Claim: %v, %v", first, err)
	}

	setClock(2 * time.Hour) // the database is two hours ahead: both expired
	b, err := s.Begin(ctx, beginArgs("clock", 10*time.Second))
	if err != nil || b.Lease == nil {
		t.Fatalf("Begin with the database 2h ahead: %+v, %v; want a Lease (the response expired)", b, err)
	}
	if err := b.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	claim.Token = "t2"
	if first, err := s.Claim(ctx, claim); err != nil || !first {
		t.Fatalf("Claim with the database 2h ahead: %v, %v; want first (the claim expired)", first, err)
	}

	setClock(0)
	claim.Token = "t3"
	if first, err := s.Claim(ctx, claim); err != nil || first {
		t.Fatalf("Claim with the database's clock back: %v, %v; want not first", first, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLateTakeIsNoLease: a lease row written, whose answer came only
// after the lease's TTL had run out (a stalled connection), makes no
// Lease: meanwhile the row expired and another request took the key over,
// and two requests would run at once. Begin reports ErrUnavailable and
// leaves the new holder's row alone.
func TestLateTakeIsNoLease(t *testing.T) {
	eachDB(t, func(t *testing.T, d database) {
		db, f := d.openFaulty(t)
		s, idem := newStoreTables(t, db)
		const ttl, late = 300 * time.Millisecond, 700 * time.Millisecond
		f.answerLate("INSERT", late) // the first write of a lease row
		type begun struct {
			b   httpidem.Begun
			err error
		}
		first := make(chan begun, 1)
		sent := time.Now()
		go func() {
			b, err := s.Begin(t.Context(), beginArgs("late", ttl))
			first <- begun{b, err}
		}()
		// The row is written at once and expires ttl later; the next
		// request takes it over while the first answer is held back.
		for count(t, db, "SELECT COUNT(*) FROM "+idem+" WHERE kind = 0") == 0 {
			if time.Since(sent) > late {
				t.Fatal("the first request wrote no lease row")
			}
			time.Sleep(time.Millisecond)
		}
		var second httpidem.Lease
		for second == nil {
			if time.Since(sent) > late {
				t.Fatal("the expired row was not taken over while the first answer was held back")
			}
			b, err := s.Begin(t.Context(), beginArgs("late", 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			second = b.Lease
			if second == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		defer second.Release(t.Context())
		r := <-first
		if took := time.Since(sent); took < late {
			t.Fatalf("the first Begin answered after %v: the fault did not hold it back", took)
		}
		if r.b.Lease != nil {
			defer r.b.Lease.Release(t.Context())
			t.Fatalf("a write answered %v after its %v lease was sent made a Lease (Lost closed: %v) while another request held the key",
				late, ttl, closed(r.b.Lease.Lost()))
		}
		if !errors.Is(r.err, httpidem.ErrUnavailable) {
			t.Fatalf("late Begin: %+v, %v; want ErrUnavailable", r.b, r.err)
		}
		time.Sleep(100 * time.Millisecond) // the late lease's clean-up, if any, has run
		if n := count(t, db, "SELECT COUNT(*) FROM "+idem+" WHERE kind = 0"); n != 1 {
			t.Fatalf("%d lease rows, want the second request's", n)
		}
		if err := second.Err(); err != nil {
			t.Fatalf("the second lease: %v", err)
		}
	})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
