package core

import (
	"context"
	"fmt"
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
					5000, "tok", "tok", "tok", "tok").Int64Slice()
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

// A batch of renewals with two TTLs renews each lease to its own TTL:
// extend_many.lua takes one TTL a call, so the batch goes in one call per
// TTL. The batch also holds a lease of another token and a missing one,
// which are left alone, and an odd lease out of each TTL renews alone.
func TestExtendBatchMixedTTLs(t *testing.T) {
	for _, srv := range scriptServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.rdb
			p := redistest.Prefix(t, rdb)
			b := newRedisBackend(rdb, &clientConfig{})
			c := &Client{cfg: clientConfig{prefix: p}}
			var reqs []extendReq
			add := func(key, stored, tok string, ttl time.Duration) {
				n := c.names(key)
				if stored != "" {
					rdb.Set(ctx, n.lease, stored, 500*time.Millisecond)
				}
				reqs = append(reqs, extendReq{n: &n, token: tok, ttl: ttl})
			}
			for i := range 3 {
				add(fmt.Sprintf("short%d", i), "tok", "tok", 4*time.Second)
				add(fmt.Sprintf("long%d", i), "tok|meta", "tok", 8*time.Second)
			}
			add("alone", "tok", "tok", 6*time.Second)
			add("other", "someone", "tok", 8*time.Second)
			add("none", "", "tok", 4*time.Second)
			b.extend(ctx, reqs)
			for _, r := range reqs {
				key := r.n.lease
				d := rdb.PTTL(ctx, key).Val()
				switch {
				case strings.HasSuffix(key, "{other}"):
					if r.ok || r.err != nil || d > 500*time.Millisecond {
						t.Errorf("%s: ok %v, err %v, lasts %v: another token's lease was extended", key, r.ok, r.err, d)
					}
				case strings.HasSuffix(key, "{none}"):
					if r.ok || !r.gone || r.err != nil || rdb.Exists(ctx, key).Val() != 0 {
						t.Errorf("%s: ok %v, gone %v, err %v", key, r.ok, r.gone, r.err)
					}
				default:
					if !r.ok || r.err != nil || d < r.ttl-time.Second || d > r.ttl {
						t.Errorf("%s: ok %v, err %v, lasts %v, want about %v", key, r.ok, r.err, d, r.ttl)
					}
				}
			}
		})
	}
}
