package core

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// fenceLib is lib_fence.lua as variant "SET GET" finds it, or "no GET":
// fresh_fence's SET ... GET misspelled, as a server before 6.2 refuses it.
func fenceLib(t *testing.T, variant string) string {
	t.Helper()
	if variant != "no GET" {
		return libFence
	}
	lib := strings.Replace(libFence, "'PX', ttl, 'GET')", "'PX', ttl, 'NOT-AN-OPTION')", 1)
	if lib == libFence {
		t.Fatal("fresh_fence's SET ... GET not found")
	}
	return lib
}

// fresh_fence (lib_fence.lua), the fence of a mutex acquisition that found
// its key free, on miniredis and the shared Redis, with SET ... GET and
// without it (the option misspelled, as a server before 6.2 refuses it,
// so next_fence serves): the fence is above the old counter and at least
// the server clock in µs, the counter is left at the fence, and it lives
// at least the retention from now.
func TestFreshFence(t *testing.T) {
	const retention = 300000 // ms
	for _, srv := range scriptServers(t) {
		for _, variant := range []string{"SET GET", "no GET"} {
			t.Run(srv.name+"/"+variant, func(t *testing.T) {
				ctx := context.Background()
				rdb := srv.rdb
				src := fenceLib(t, variant) + "\nreturn fresh_fence(KEYS[1], ARGV[1])"
				key := redistest.Prefix(t, rdb) + ":fence"
				tm, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				clock := tm.UnixMicro()
				for _, c := range []struct {
					name string
					old  int64 // 0: no counter
					ttl  time.Duration
				}{
					{"no counter", 0, 0},
					{"counter below the clock, long expiry", 5, time.Hour},
					{"counter ahead of the clock, long expiry", clock + 1e12, time.Hour},
					{"counter ahead of the clock, expiring soon", clock + 2e12, time.Second},
				} {
					rdb.Del(ctx, key)
					if c.old != 0 {
						rdb.Set(ctx, key, c.old, c.ttl)
					}
					f, err := rdb.Eval(ctx, src, []string{key}, retention).Int64()
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					if f <= c.old || f < clock {
						t.Errorf("%s: fence %d, old counter %d, clock %d", c.name, f, c.old, clock)
					}
					if c.old > clock && f != c.old+1 {
						t.Errorf("%s: fence %d, want one above the counter, %d", c.name, f, c.old+1)
					}
					got, _ := rdb.Get(ctx, key).Result()
					if n, _ := strconv.ParseInt(got, 10, 64); n != f {
						t.Errorf("%s: counter %q after fence %d", c.name, got, f)
					}
					if d := rdb.PTTL(ctx, key).Val(); d < retention*time.Millisecond-5*time.Second {
						t.Errorf("%s: counter lives %v, want at least the retention", c.name, d)
					}
				}
				rdb.Del(ctx, key)
			})
		}
	}
}

// fresh_fence with a Redlock proposal (redlock_acquire.lua), with SET ...
// GET and without it: a proposal ahead of the clock by less than
// FENCE_LEAD_MAX is the fence, and the counter lives until the clock has
// passed it, and the retention beyond; one further ahead is cut to the
// lead; one behind the clock leaves the clock's fence; a counter at or
// above the floor is counted on from.
func TestFreshFenceProposed(t *testing.T) {
	const retention = 300000 // ms
	const lead = 200000      // µs, FENCE_LEAD_MAX
	for _, srv := range scriptServers(t) {
		for _, variant := range []string{"SET GET", "no GET"} {
			t.Run(srv.name+"/"+variant, func(t *testing.T) {
				ctx := context.Background()
				rdb := srv.rdb
				src := fenceLib(t, variant) + "\nreturn fresh_fence(KEYS[1], ARGV[1], ARGV[2])"
				key := redistest.Prefix(t, rdb) + ":fence"
				for _, c := range []struct {
					name  string
					ahead int64 // proposal - clock, µs
					old   int64 // counter - clock, µs; 0: no counter
				}{
					{"proposal ahead", 150000, 0},
					{"proposal beyond the lead", 5e9, 0},
					{"proposal behind the clock", -5e6, 0},
					{"counter above the proposal", 100000, 180000},
				} {
					rdb.Del(ctx, key)
					tm, err := rdb.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					clock := tm.UnixMicro()
					if c.old != 0 {
						rdb.Set(ctx, key, clock+c.old, time.Hour)
					}
					proposed := clock + c.ahead
					f, err := rdb.Eval(ctx, src, []string{key}, retention, strconv.FormatInt(proposed, 10)).Int64()
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					after, err := rdb.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					var lo, hi int64 // the fence's bounds
					switch {
					case c.old != 0:
						lo, hi = clock+c.old+1, clock+c.old+1
					case c.ahead > lead:
						lo, hi = clock+lead, after.UnixMicro()+lead
					case c.ahead < 0:
						lo, hi = clock, after.UnixMicro()
					default:
						lo, hi = proposed, proposed
					}
					if f < lo || f > hi {
						t.Errorf("%s: fence %d, want within [%d, %d]", c.name, f, lo, hi)
					}
					got, _ := rdb.Get(ctx, key).Result()
					if n, _ := strconv.ParseInt(got, 10, 64); n != f {
						t.Errorf("%s: counter %q after fence %d", c.name, got, f)
					}
					// It lives until the clock passes the fence, and the
					// retention beyond (less the time the last call took).
					want := time.Duration(retention)*time.Millisecond + time.Duration(f-after.UnixMicro())*time.Microsecond - 50*time.Millisecond
					if d := rdb.PTTL(ctx, key).Val(); d < want {
						t.Errorf("%s: counter lives %v, want at least %v", c.name, d, want)
					}
				}
				rdb.Del(ctx, key)
			})
		}
	}
}
