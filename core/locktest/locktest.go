// Package locktest is the conformance suite of core.Client backends: every
// backend — in-memory, single Redis, Redis Cluster, Redlock, or one you
// write — must pass it the same way.
//
// Run it from a test:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T) *core.Client {
//			c, err := core.NewRedis(rdb)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return c
//		})
//	}
//
// newClient is called once per subtest; the suite closes the client when the
// subtest ends. Subtests run in parallel and use keys unique to themselves.
// The suite sleeps for short TTLs to pass (about three seconds in all), so a
// backend whose clock does not run (miniredis) must be driven forward by the
// caller, for example with a goroutine calling FastForward.
package locktest

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// Run runs the conformance suite.
func Run(t *testing.T, newClient func(t *testing.T) *core.Client) {
	tests := []struct {
		name string
		fn   func(t *testing.T, c *core.Client, key string)
	}{
		{"Exclusion", testExclusion},
		{"FenceIncreases", testFenceIncreases},
		{"TokensUnique", testTokensUnique},
		{"StaleHandle", testStaleHandle},
		{"ReleaseIdempotent", testReleaseIdempotent},
		{"ReleaseCancelledContext", testReleaseCancelledContext},
		{"ExpiryWithoutRenewal", testExpiryWithoutRenewal},
		{"Renewal", testRenewal},
		{"Extend", testExtend},
		{"LossReported", testLossReported},
		{"DoCancelledOnLoss", testDoCancelledOnLoss},
		{"WaitWokenByRelease", testWaitWokenByRelease},
		{"WaitBounded", testWaitBounded},
		{"Reentrancy", testReentrancy},
		{"TokenReentry", testTokenReentry},
		{"InvalidInput", testInvalidInput},
		{"Inspect", testInspect},
		{"MutualExclusionUnderContention", testContention},
		{"DoReleasesOnPanic", testDoReleasesOnPanic},
		{"Close", testClose},
		{"FairOrder", testFairOrder},
		{"FairGiveUp", testFairGiveUp},
		{"ReleaseWakesEveryTime", testReleaseWakesEveryTime},
		{"ExpiryNeverMovesBack", testExpiryNeverMovesBack},
		{"KeyBraces", testKeyBraces},
		{"DriftMarginValidated", testDriftMarginValidated},
		{"LostBeforeTakeover", testLostBeforeTakeover},
		{"CloseTellsEveryLease", testCloseTellsEveryLease},
		{"SemaphoreLimit", testSemaphoreLimit},
		{"SemaphorePermitExpires", testSemaphorePermitExpires},
		{"SemaphoreFair", testSemaphoreFair},
		{"RWMutex", testRWMutex},
		{"CampaignObserve", testCampaignObserve},
		{"LockAll", testLockAll},
		{"UnsupportedFails", testUnsupportedFails},
		{"Records", testRecords},
		{"ClaimWithin", testClaimWithin},
		{"Scan", testScan},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t)
			t.Cleanup(func() { c.Close() })
			tc.fn(t, c, uniqueKey(t))
		})
	}
}

func uniqueKey(t *testing.T) string {
	return "locktest:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + rand.Text()[:8]
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustLock(t *testing.T, c *core.Client, key string, opts ...core.LockOption) *core.Lock {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key, opts...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}

func mustRelease(t *testing.T, l *core.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", l.Key(), err)
	}
}

func assertHeldElsewhere(t *testing.T, c *core.Client, key string) {
	t.Helper()
	l, err := c.TryLock(context.Background(), key)
	if !errors.Is(err, core.ErrNotAcquired) {
		if l != nil {
			l.Release(context.Background())
		}
		t.Fatalf("TryLock(%q) on a held key: got %v, want ErrNotAcquired", key, err)
	}
}

// waitClosed fails the test if ch is not closed within d (a generous bound
// on something that must happen, not a performance assertion).
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

// lockSoon takes key, retrying while it is still held for up to 5 s.
func lockSoon(t *testing.T, c *core.Client, key string) *core.Lock {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := c.TryLock(ctxT(t), key)
		switch {
		case err == nil:
			return l
		case !errors.Is(err, core.ErrNotAcquired) || time.Now().After(deadline):
			t.Fatalf("TryLock(%q): %v", key, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stealLease deletes the lease behind its holder's back, the way a second
// process holding the token would.
func stealLease(t *testing.T, c *core.Client, token, key string) {
	t.Helper()
	other, err := c.TryLock(context.Background(), key, core.WithToken(token))
	if err != nil {
		t.Fatalf("re-enter with token: %v", err)
	}
	mustRelease(t, other)
}

// WaitWaiters waits, at most 10 s, until c's Inspect shows n waiters
// queued on key (a backend's own tests use it too).
func WaitWaiters(t *testing.T, c *core.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d fair waiters queued, want %d", info.Waiters, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitFor polls cond every 2 ms until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// skipUnlessFair skips fair-mode tests on backends without it (Redlock).
func skipUnlessFair(t *testing.T, c *core.Client, _ string) {
	t.Helper()
	skipUnless(t, c, core.CapFair, "fair queueing (WithFair)")
}

// skipUnless skips t, saying why, when c's backend does not declare need:
// a capability a backend lacks is never tested silently.
func skipUnless(t *testing.T, c *core.Client, need core.Capability, what string) {
	t.Helper()
	if err := c.Require(need); err != nil {
		t.Skipf("skipped: %s: needs the capability %s, which this backend does not declare (it declares %q)", what, need, c.Capabilities().String())
	}
}
