package core

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

func TestKeepCounter(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		limit int
		age   time.Duration // since the acquisition was sent
		kept  time.Duration // since a renewal last kept the counter (0: none)
		ttl   time.Duration
		want  bool
	}{
		{"young", 0, time.Second, 0, 3 * time.Second, false},
		{"old", 0, fenceRetention - time.Minute, 0, 3 * time.Second, true},
		{"old, kept lately", 0, fenceRetention - time.Minute, time.Second, 3 * time.Second, false},
		{"old, kept long ago", 0, 2 * fenceRetention, fenceRetention - time.Minute, 3 * time.Second, true},
		{"long ttl", 0, 0, 0, 2 * time.Minute, true},
		{"write hold", rwWrite, fenceRetention, 0, 3 * time.Second, true},
		{"read hold", rwRead, fenceRetention, 0, 3 * time.Second, false},
		{"permits", 3, fenceRetention, 0, 3 * time.Second, false},
	} {
		l := &lease{n: names{limit: tc.limit}, counterBy: now.Add(-tc.age + fenceRetention)}
		if tc.kept > 0 {
			l.keptCounter(now.Add(-tc.kept))
		}
		if got := l.keepCounter(now, tc.ttl); got != tc.want {
			t.Errorf("%s: keepCounter %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The watchdog's renewals keep the counter of a lease held for long alive:
// here the lease is made to look acquired a retention ago, its counter
// left with seconds to live.
func TestWatchdogKeepsCounter(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	c := mustNew(NewRedis(rdb, WithKeyPrefix("fkw")))
	defer c.Close()
	bg := context.Background()
	h, err := c.TryLock(bg, "k", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(bg)
	h.l.mu.Lock()
	h.l.counterBy = time.Now() // as if acquired a retention ago
	h.l.mu.Unlock()
	rdb.PExpire(bg, h.l.n.fence, 5*time.Second)
	time.Sleep(time.Second) // renewals every 100 ms
	if left, _ := rdb.PTTL(bg, h.l.n.fence).Result(); left < fenceRetention-time.Second {
		t.Errorf("the counter of a lease held a retention long expires in %v", left)
	}
}
