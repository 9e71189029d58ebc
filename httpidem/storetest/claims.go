package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
)

// RunClaims checks an httpidem.ClaimStore: one first claim per subject,
// object and day; compare-and-delete Unclaim; argument checks; concurrent
// claims — and, when the store is an httpidem.ClaimCounter, exact and
// approximate counts.
func RunClaims(t *testing.T, newStore func(t *testing.T) httpidem.ClaimStore) {
	t.Helper()
	tests := []struct {
		name    string
		counter bool
		f       func(t *testing.T, s httpidem.ClaimStore)
	}{
		{"FirstClaimOnce", false, testFirstClaimOnce},
		{"ClaimsAreSeparate", false, testClaimsSeparate},
		{"UnclaimByToken", false, testUnclaimByToken},
		{"InvalidArguments", false, testClaimInvalid},
		{"OneFirstUnderConcurrency", false, testOneFirst},
		{"CountExact", true, testCountExact},
		{"CountApprox", true, testCountApprox},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			if _, ok := s.(httpidem.ClaimCounter); tt.counter && !ok {
				t.Skip("the store is not an httpidem.ClaimCounter")
			}
			tt.f(t, s)
		})
	}
}

// today is a fixed day; claims expire an hour after the test.
var today = httpidem.Day{Year: 2026, Month: time.March, Day: 14}

func claimArgs(subject, object, token string) httpidem.ClaimArgs {
	return httpidem.ClaimArgs{Scope: "vote", Object: object, Subject: subject, Day: today,
		ExpireAt: time.Now().Add(time.Hour), Token: token}
}

func claim(t *testing.T, s httpidem.ClaimStore, a httpidem.ClaimArgs) bool {
	t.Helper()
	first, err := s.Claim(t.Context(), a)
	if err != nil {
		t.Fatalf("Claim %+v: %v", a, err)
	}
	return first
}

func testFirstClaimOnce(t *testing.T, s httpidem.ClaimStore) {
	if !claim(t, s, claimArgs("u1", "item", "t1")) {
		t.Fatal("first Claim: not first")
	}
	if claim(t, s, claimArgs("u1", "item", "t2")) {
		t.Fatal("second Claim the same day: first again")
	}
}

func testClaimsSeparate(t *testing.T, s httpidem.ClaimStore) {
	claim(t, s, claimArgs("u1", "a", "t"))
	other := []httpidem.ClaimArgs{
		claimArgs("u2", "a", "t"),   // another subject
		claimArgs("u1", "b", "t"),   // another object
		claimArgs("u1", "", "t"),    // no object
		claimArgs("u1", "a/b", "t"), // an object with a separator
	}
	next := claimArgs("u1", "a", "t")
	next.Day = today.AddDays(1)
	other = append(other, next)
	scoped := claimArgs("u1", "a", "t")
	scoped.Scope = "checkin"
	other = append(other, scoped)
	for _, a := range other {
		if !claim(t, s, a) {
			t.Errorf("Claim %+v: not first, but only (u1, a, vote, today) was claimed", a)
		}
	}
}

func testUnclaimByToken(t *testing.T, s httpidem.ClaimStore) {
	claim(t, s, claimArgs("u1", "x", "mine"))
	if err := s.Unclaim(t.Context(), claimArgs("u1", "x", "theirs")); err != nil {
		t.Fatalf("Unclaim with another token: %v", err)
	}
	if claim(t, s, claimArgs("u1", "x", "t3")) {
		t.Fatal("Unclaim with another token freed the claim")
	}
	if err := s.Unclaim(t.Context(), claimArgs("u1", "x", "mine")); err != nil {
		t.Fatalf("Unclaim: %v", err)
	}
	if !claim(t, s, claimArgs("u1", "x", "t4")) {
		t.Fatal("Claim after Unclaim: not first")
	}
}

func testClaimInvalid(t *testing.T, s httpidem.ClaimStore) {
	bad := map[string]httpidem.ClaimArgs{}
	a := claimArgs("", "o", "t")
	bad["empty subject"] = a
	a = claimArgs("u", "o", "t")
	a.Scope = "no\ncontrol characters"
	bad["bad scope"] = a
	a = claimArgs("u", "o", "t")
	a.Day = httpidem.Day{}
	bad["zero day"] = a
	a = claimArgs("u", "o", "")
	bad["no token"] = a
	for name, a := range bad {
		if _, err := s.Claim(t.Context(), a); !errors.Is(err, httpidem.ErrInvalidArgument) {
			t.Errorf("%s: Claim error %v, want ErrInvalidArgument", name, err)
		}
	}
}

func testOneFirst(t *testing.T, s httpidem.ClaimStore) {
	const n = 16
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		firsts int
		errs   []error
	)
	for i := range n {
		wg.Go(func() {
			first, err := s.Claim(t.Context(), claimArgs("u1", "race", fmt.Sprint("t", i)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if first {
				firsts++
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 || firsts != 1 {
		t.Fatalf("%d concurrent Claims: %d first, errors %v; want exactly one", n, firsts, errs)
	}
}

func count(t *testing.T, s httpidem.ClaimStore, object string) int64 {
	t.Helper()
	n, err := s.(httpidem.ClaimCounter).Count(t.Context(), "vote", object, today)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

func testCountExact(t *testing.T, s httpidem.ClaimStore) {
	if n := count(t, s, "exact"); n != 0 {
		t.Fatalf("Count before any claim = %d", n)
	}
	for _, u := range []string{"u1", "u2", "u3", "u1"} {
		a := claimArgs(u, "exact", "tok-"+u)
		a.Count = httpidem.CountExact
		claim(t, s, a)
	}
	if n := count(t, s, "exact"); n != 3 {
		t.Fatalf("Count after 3 subjects (one twice) = %d", n)
	}
	a := claimArgs("u2", "exact", "tok-u2")
	a.Count = httpidem.CountExact
	if err := s.Unclaim(t.Context(), a); err != nil {
		t.Fatalf("Unclaim: %v", err)
	}
	if n := count(t, s, "exact"); n != 2 {
		t.Fatalf("Count after an Unclaim = %d, want 2", n)
	}
}

func testCountApprox(t *testing.T, s httpidem.ClaimStore) {
	for i := range 20 {
		a := claimArgs(fmt.Sprint("user-", i%10), "approx", "")
		a.Count = httpidem.CountApprox
		first := claim(t, s, a)
		if i >= 10 && first {
			t.Errorf("CountApprox: subject %d seen again reported first", i%10)
		}
	}
	if n := count(t, s, "approx"); n != 10 {
		t.Fatalf("approximate Count of 10 subjects = %d (a HyperLogLog is exact this small)", n)
	}
}
