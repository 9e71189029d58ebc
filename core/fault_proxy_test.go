package core_test

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// A faultProxy is a TCP proxy between clients and one Redis, on 127.0.0.1,
// that injects network faults: delays, a black hole, resets, a cut. It is
// stopped (every connection through it closed) when the test ends.
type faultProxy struct {
	t        *testing.T
	upstream string
	addr     string

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{} // both sides of every proxied connection
	faults [2]streamFaults       // by direction: up (client to Redis), down
	reset  bool                  // every connection is reset as it comes
	wg     sync.WaitGroup
}

// The directions data flows through the proxy.
const (
	up   = 0 // client to Redis
	down = 1 // Redis to client
)

// streamFaults are the faults of one direction.
type streamFaults struct {
	latency, jitter time.Duration // each chunk waits latency ± jitter
	blackhole       bool          // chunks are dropped, connections stay open
}

// startProxy starts a proxy to upstream and returns it; Addr is where
// clients connect.
func startProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	fp := &faultProxy{t: t, upstream: upstream, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	fp.serve(ln)
	t.Cleanup(func() {
		fp.stop()
		fp.wg.Wait()
	})
	return fp
}

// Addr returns the proxy's listening address.
func (fp *faultProxy) Addr() string { return fp.addr }

// serve accepts connections on ln until it is closed.
func (fp *faultProxy) serve(ln net.Listener) {
	fp.mu.Lock()
	fp.ln = ln
	fp.mu.Unlock()
	fp.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fp.wg.Go(func() { fp.pipe(c) })
		}
	})
}

// pipe proxies one client connection.
func (fp *faultProxy) pipe(client net.Conn) {
	server, err := net.DialTimeout("tcp", fp.upstream, time.Second)
	if err != nil {
		client.Close()
		return
	}
	fp.mu.Lock()
	if fp.ln == nil || fp.reset { // cut or resetting since it was accepted
		fp.mu.Unlock()
		resetConn(client)
		server.Close()
		return
	}
	fp.conns[client], fp.conns[server] = struct{}{}, struct{}{}
	fp.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { fp.copy(server, client, up) })
	both.Go(func() { fp.copy(client, server, down) })
	both.Wait()
	fp.mu.Lock()
	delete(fp.conns, client)
	delete(fp.conns, server)
	fp.mu.Unlock()
}

// copy moves data from src to dst through the faults of direction dir,
// and closes both when either side ends.
func (fp *faultProxy) copy(dst, src net.Conn, dir int) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			fp.mu.Lock()
			f := fp.faults[dir]
			fp.mu.Unlock()
			if f.latency > 0 {
				d := f.latency
				if f.jitter > 0 {
					d += time.Duration(rand.Int64N(int64(2*f.jitter))) - f.jitter
				}
				time.Sleep(d)
			}
			if !f.blackhole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				fp.t.Logf("fault proxy: %v", err)
			}
			return
		}
	}
}

// delay makes each chunk of direction dir wait latency ± jitter until the
// returned function is called.
func (fp *faultProxy) delay(dir int, latency, jitter time.Duration) (remove func()) {
	return fp.set(func(f *streamFaults) { f.latency, f.jitter = latency, jitter },
		func(f *streamFaults) { f.latency, f.jitter = 0, 0 }, dir)
}

// blackhole drops the data of direction dir, keeping connections open,
// until the returned function is called.
func (fp *faultProxy) blackhole(dir int) (remove func()) {
	return fp.set(func(f *streamFaults) { f.blackhole = true }, func(f *streamFaults) { f.blackhole = false }, dir)
}

func (fp *faultProxy) set(on, off func(*streamFaults), dir int) func() {
	fp.mu.Lock()
	on(&fp.faults[dir])
	fp.mu.Unlock()
	return func() {
		fp.mu.Lock()
		off(&fp.faults[dir])
		fp.mu.Unlock()
	}
}

// resetAll resets every connection (TCP RST, "connection reset by peer"),
// and every new one, until the returned function is called.
func (fp *faultProxy) resetAll() (remove func()) {
	fp.mu.Lock()
	fp.reset = true
	for c := range fp.conns {
		resetConn(c)
	}
	fp.mu.Unlock()
	return func() {
		fp.mu.Lock()
		fp.reset = false
		fp.mu.Unlock()
	}
}

// cut closes every connection through the proxy and refuses new ones until
// the returned function listens again on the same address.
func (fp *faultProxy) cut() (restore func()) {
	fp.stop()
	return func() {
		for i := 0; ; i++ {
			ln, err := net.Listen("tcp", fp.addr)
			if err == nil {
				fp.serve(ln)
				return
			}
			if i == 50 {
				fp.t.Errorf("fault proxy: listen again: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// stop closes the listener and every connection.
func (fp *faultProxy) stop() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.ln != nil {
		fp.ln.Close()
		fp.ln = nil
	}
	for c := range fp.conns {
		c.Close()
	}
}

// resetConn closes c with a TCP RST instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
