package dbguard_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/dbguard"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// dropProxy forwards to Redis at up. Armed, the first command containing
// match is forwarded and answered by the server, and then the client's
// connection is broken instead of the answer passed on: the write
// happened, its answer was lost (a reset, a failover, a killed client).
type dropProxy struct {
	ln      net.Listener
	up      string
	match   []byte
	armed   atomic.Bool
	dropped atomic.Int32
}

func startDropProxy(t *testing.T, up, match string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, up: up, match: []byte(match)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.up)
	if err != nil {
		return
	}
	defer s.Close()
	var swallow atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && swallow.Load() { // answered: lose it, break the connection
				p.dropped.Add(1)
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
				c.Close()
				s.Close()
				return
			}
			if n > 0 {
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if bytes.Contains(bytes.ToUpper(buf[:n]), p.match) && p.armed.CompareAndSwap(true, false) {
				swallow.Store(true)
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func inc(old []byte, _ bool) ([]byte, error) {
	n, _ := strconv.Atoi(string(old))
	return []byte(strconv.Itoa(n + 1)), nil
}

// A Redis put whose answer is lost after the script ran. go-redis sends it
// again (MaxRetries, 3 by default); the script found the version it had
// just bumped and answered 0, so Put said ErrVersionConflict ("changes
// nothing") for a write that happened, and Update redid its change on top
// of its own write: one Update(+1) moved a counter by two (review 13). A
// put now knows its own write by its id. Without resends, Put says
// ErrOutcomeUnknown.
func TestVersionedRedisPutLostAnswer(t *testing.T) {
	script, err := os.ReadFile("scripts/versioned_put.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(script) // EVALSHA <the put script's sha>: the Put, not the Get
	match := strings.ToUpper(hex.EncodeToString(sum[:]))
	run := func(t *testing.T, up string) {
		p := startDropProxy(t, up, match)
		ctx := ctxFor(t, 20*time.Second)
		prefix := "dbguard-test-" + rand.Text()[:10]
		direct := redis.NewClient(&redis.Options{Addr: up})
		t.Cleanup(func() { deletePrefix(t, direct, prefix); direct.Close() })
		for _, retries := range []int{0, -1} { // go-redis's default (3), none
			rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: retries})
			t.Cleanup(func() { rdb.Close() })
			kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInRedis(rdb, prefix))))
			key := "cart" + strconv.Itoa(retries)
			must(t, kv.Put(ctx, key, []byte("0"), 0))
			p.armed.Store(true)
			err := kv.Update(ctx, key, inc)
			val, ver, gerr := kv.Get(ctx, key)
			t.Logf("MaxRetries %d: Update(+1): %v (answers lost: %d); now %q v%d %v", retries, err, p.dropped.Load(), val, ver, gerr)
			if p.armed.Load() {
				t.Fatal("no answer was lost")
			}
			if string(val) != "1" || ver != 2 {
				t.Fatalf("one Update(+1) left %q at version %d, want \"1\" at 2", val, ver)
			}
			switch {
			case retries == 0 && err != nil:
				t.Fatalf("Update, sent again after its answer was lost: %v, want nil (it was written once)", err)
			case retries < 0 && !errors.Is(err, dbguard.ErrOutcomeUnknown):
				t.Fatalf("Update, its answer lost: %v, want ErrOutcomeUnknown", err)
			}
		}
	}
	t.Run("miniredis", func(t *testing.T) { run(t, miniredis.RunT(t).Addr()) })
	t.Run("redis", func(t *testing.T) { redistest.Client(t); run(t, redistest.Addr(t)) })
}

// A SQL put whose statement committed and whose answer was lost returned
// the driver's error as it was, nothing saying the write may have happened:
// a caller retrying Update applied its change twice (review 13). It is
// ErrOutcomeUnknown now.
func TestVersionedSQLPutLostAnswer(t *testing.T) {
	db, l := openLossySQLite(t)
	kv := mustNew(dbguard.NewVersioned(mustNew(dbguard.VersionsInSQL(db))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, kv.Migrate(ctx))
	for _, tc := range []struct{ key, stmt string }{{"counter", "UPDATE"}, {"fresh", "INSERT"}} {
		if tc.stmt == "UPDATE" {
			must(t, kv.Put(ctx, tc.key, []byte("0"), 0))
		}
		l.arm(tc.stmt, true) // run the statement, lose its answer
		err := kv.Update(ctx, tc.key, inc)
		val, ver, gerr := kv.Get(ctx, tc.key)
		t.Logf("%s: Update(+1): %v; now %q v%d %v", tc.stmt, err, val, ver, gerr)
		if !errors.Is(err, dbguard.ErrOutcomeUnknown) {
			t.Fatalf("%s committed, its answer lost: Update returned %v, want ErrOutcomeUnknown", tc.stmt, err)
		}
	}
}
