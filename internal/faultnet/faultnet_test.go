package faultnet_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/faultnet"
)

// echo starts a line echo server, stopped when the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(c, c) })
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("got " + line)
	}
	return err
}

func TestStallHoldsAndHeals(t *testing.T) {
	p := faultnet.Start(t, echo(t))
	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	heal := p.Stall()
	if err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatal("a round trip through a stalled proxy answered")
	}
	heal()
	// The line sent during the stall was held, not dropped: it comes back
	// first, then the next one.
	c.SetDeadline(time.Now().Add(time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("the held line: %q, %v", line, err)
	}
	if err := roundTrip(c, r, time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

func TestCutClosesAndRefuses(t *testing.T) {
	p := faultnet.Start(t, echo(t))
	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	heal := p.Cut()
	if err := roundTrip(c, r, time.Second); err == nil {
		t.Fatal("a cut connection answered")
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		c2.Close()
		t.Fatal("a cut proxy accepted a connection")
	}
	heal()
	c3, r3 := dial(t, p.Addr())
	if err := roundTrip(c3, r3, time.Second); err != nil {
		t.Fatalf("after heal, on the same address: %v", err)
	}
}

func TestResetAndBlackhole(t *testing.T) {
	p := faultnet.Start(t, echo(t))
	c, r := dial(t, p.Addr())
	undo := p.Blackhole(faultnet.Up)
	if err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatal("a black-holed round trip answered")
	}
	undo()
	undo = p.Reset()
	if err := roundTrip(c, r, time.Second); err == nil {
		t.Fatal("a reset connection answered")
	}
	undo()
	c2, r2 := dial(t, p.Addr())
	if err := roundTrip(c2, r2, time.Second); err != nil {
		t.Fatalf("after reset lifted: %v", err)
	}
}
