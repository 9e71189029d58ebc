package httpidem_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/httpidem"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// lossProxy forwards to Redis; when armed with a byte string, the
// connection carrying a command that contains it has the server's answer
// swallowed and is then closed (the server ran the command).
type lossProxy struct {
	ln    net.Listener
	armed atomic.Pointer[[]byte]
	hits  atomic.Int32
	wg    sync.WaitGroup
}

func newLossProxy(t *testing.T, target string) *lossProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			var drop atomic.Bool
			go func() { // client -> server
				defer p.wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if m := p.armed.Load(); m != nil && bytes.Contains(buf[:n], *m) {
							p.armed.Store(nil)
							p.hits.Add(1)
							drop.Store(true)
						}
						s.Write(buf[:n])
					}
					if err != nil {
						s.Close()
						return
					}
				}
			}()
			go func() { // server -> client
				defer p.wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						if drop.Load() {
							c.Close()
							s.Close()
							return
						}
						c.Write(buf[:n])
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *lossProxy) arm(b string) { bb := []byte(b); p.armed.Store(&bb) }

// The first claim of the day runs on Redis and its answer is lost;
// go-redis sends it again. A plain SET NX then failed: the only claimant
// was told "already claimed today", its handler never ran and the claim
// was never given back (review 14). The claim now knows its own token.
func TestClaimLostAnswerStillFirst(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  httpidem.DailyConfig
	}{
		{"gate", httpidem.DailyConfig{Scope: "vote"}},
		{"counted", httpidem.DailyConfig{Scope: "vote", Counted: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			admin := redistest.Client(t)
			px := newLossProxy(t, admin.Options().Addr)
			rdb := redis.NewClient(&redis.Options{Addr: px.ln.Addr().String()}) // default MaxRetries: resends
			defer rdb.Close()
			pfx := prefix(t)
			defer deleteKeys(admin, pfx)
			store := must(httpidem.NewRedisStore(rdb, httpidem.WithKeyPrefix(pfx)))
			defer store.Close()
			cfg := mode.cfg
			cfg.Store = store
			g := must(httpidem.NewGate(cfg))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := g.Claim(ctx, "warmup", "poll-0"); err != nil { // loads the script: the armed call is an EVALSHA
				t.Fatal(err)
			}
			px.arm("evalsha")
			first, err := g.Claim(ctx, "alice", "poll-1")
			n, cerr := g.Count(ctx, "poll-1", g.Today())
			t.Logf("answers lost %d; alice's claim: first=%v err=%v; count %d %v", px.hits.Load(), first, err, n, cerr)
			if px.hits.Load() != 1 {
				t.Fatal("no answer was lost: the case under test did not arise")
			}
			if err != nil || !first {
				t.Fatalf("alice's only claim of the day: first=%v err=%v, want the first", first, err)
			}
			if mode.cfg.Counted && n != 1 {
				t.Fatalf("count %d after one claim, want 1", n)
			}
			if again, err := g.Claim(ctx, "alice", "poll-1"); err != nil || again {
				t.Fatalf("alice's second claim: first=%v err=%v, want a duplicate", again, err)
			}
		})
	}
}
