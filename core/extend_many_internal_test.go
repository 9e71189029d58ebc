package core

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// extend_many.lua renews with PEXPIRE GT where the server knows the option
// (Redis 7), and reads the remaining time first where it does not (6.2).
// Both ways, on miniredis and the shared Redis: a lease is never
// shortened, a short one is lengthened to its ttl, the answer is 1 (it
// lasts at least its ttl), and a lease of another token or none is left
// alone. "No GT" is the same script with the option misspelled,
// which every server refuses.
func TestExtendManyWithAndWithoutGT(t *testing.T) {
	for _, srv := range scriptServers(t) {
		for _, variant := range []string{"GT", "no GT"} {
			t.Run(srv.name+"/"+variant, func(t *testing.T) {
				ctx := context.Background()
				rdb := srv.rdb
				src := libOwns + extendManyLua
				if variant == "no GT" {
					src = strings.Replace(src, "'GT'", "'NOT-AN-OPTION'", 1)
				}
				p := redistest.Prefix(t, rdb)
				long, short, other, none := p+":long", p+":short", p+":other", p+":none"
				rdb.Set(ctx, long, "tok", 10*time.Second)
				rdb.Set(ctx, short, "tok|meta", time.Second)
				rdb.Set(ctx, other, "someone", time.Second)
				got, err := rdb.Eval(ctx, src, []string{long, short, other, none},
					"tok", 5000, "tok", 5000, "tok", 5000, "tok", 5000).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				if want := []int64{1, 1, 0, -1}; !slices.Equal(got, want) {
					t.Errorf("answers %v, want %v", got, want)
				}
				if d := rdb.PTTL(ctx, long).Val(); d < 9*time.Second {
					t.Errorf("the longer lease was shortened to %v", d)
				}
				if d := rdb.PTTL(ctx, short).Val(); d < 4*time.Second || d > 5*time.Second {
					t.Errorf("the short lease lasts %v, want about 5 s", d)
				}
				if d := rdb.PTTL(ctx, other).Val(); d > time.Second {
					t.Errorf("another token's lease was extended to %v", d)
				}
				if n := rdb.Exists(ctx, none).Val(); n != 0 {
					t.Errorf("a missing lease was created")
				}
			})
		}
	}
}

// A scriptServer is a server a script test runs on.
type scriptServer struct {
	name string
	rdb  *redis.Client
}

// scriptServers are miniredis and the shared Redis: a script runs on both
// the same way, or a test says where it does not.
func scriptServers(t *testing.T) []scriptServer {
	_, mini := redistest.Miniredis(t, false)
	return []scriptServer{{"miniredis", mini}, {"redis", redistest.Client(t)}}
}
