package core

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// The acquisition scripts take a free key and read a held key's value in
// one call on Redis 7 (SET with NX and GET, lib_owns.lua's set_nx), and in
// two where the server refuses that pair (6.2; "no GET" is the same script
// with the option misspelled, which every server refuses). Both ways, on
// miniredis and the shared Redis: a free key is taken with its TTL, the
// same token re-enters (the lease's fence again, never a shorter lease),
// another token is told the holder's time left and changes nothing, and a
// key holding another type is an error, not a lease.
func TestSetNXWithAndWithoutGet(t *testing.T) {
	scripts := []struct{ name, src string }{
		{"acquire", libOwns + libFence + libWait + acquireLua},
		{"redlock", libOwns + libFence + redlockAcquireLua},
	}
	for _, srv := range scriptServers(t) {
		for _, sc := range scripts {
			for _, variant := range []string{"GET", "no GET"} {
				t.Run(srv.name+"/"+sc.name+"/"+variant, func(t *testing.T) {
					ctx := context.Background()
					rdb := srv.rdb
					src := sc.src
					if variant == "no GET" {
						n := strings.Count(src, "'NX', 'GET'")
						if n != 1 {
							t.Fatalf("%d SET NX GET calls in the script, want 1", n)
						}
						src = strings.Replace(src, "'NX', 'GET'", "'NX', 'NOT-AN-OPTION'", 1)
					}
					p := redistest.Prefix(t, rdb)
					lease, fence, wrong := p+":{k}", p+":{k}:fence", p+":{k}:wrong"
					run := func(keys []string, tok, val string, ttl int) ([]int64, error) {
						args := []any{tok, val, ttl, 60000}
						if sc.name == "redlock" {
							args = append(args, time.Now().UnixMicro())
						}
						return rdb.Eval(ctx, src, keys, args...).Int64Slice()
					}
					got, err := run([]string{lease, fence}, "tok", "tok|meta", 5000)
					if err != nil {
						t.Fatal(err)
					}
					if got[0] != 1 || got[1] < 1 {
						t.Fatalf("a free key: %v, want {1, fence}", got)
					}
					f := got[1]
					if v := rdb.Get(ctx, lease).Val(); v != "tok|meta" {
						t.Errorf("the lease holds %q, want tok|meta", v)
					}
					if d := rdb.PTTL(ctx, lease).Val(); d < 4*time.Second || d > 5*time.Second {
						t.Errorf("the new lease lasts %v, want about 5 s", d)
					}
					got, err = run([]string{lease, fence}, "tok", "tok|meta", 1000)
					if err != nil {
						t.Fatal(err)
					}
					if got[0] != 2 || got[1] <= f {
						t.Errorf("a re-entry: %v, want {2, a new fence above %d}", got, f)
					}
					if d := rdb.PTTL(ctx, lease).Val(); d < 4*time.Second {
						t.Errorf("a re-entry with a shorter TTL shortened the lease to %v", d)
					}
					got, err = run([]string{lease, fence}, "other", "other", 5000)
					if err != nil {
						t.Fatal(err)
					}
					if got[0] != 0 || got[1] < 4000 || got[1] > 5000 {
						t.Errorf("another token: %v, want {0, about 5000}", got)
					}
					if v := rdb.Get(ctx, lease).Val(); v != "tok|meta" {
						t.Errorf("another token's attempt left the lease %q", v)
					}
					rdb.HSet(ctx, wrong, "f", "v")
					if got, err := run([]string{wrong, fence}, "tok", "tok", 5000); err == nil {
						t.Errorf("a key of another type: %v, want an error", got)
					}
				})
			}
		}
	}
}
