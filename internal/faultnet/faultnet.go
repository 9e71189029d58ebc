// Package faultnet is a loopback TCP proxy for tests that inject network
// faults between a client and one server: delay, stall (a pause as the
// server sees it: nothing is forwarded, nothing is closed, and the bytes
// held flow again when the fault is lifted), black hole (bytes dropped,
// connections kept), reset, cut (every connection closed, new ones
// refused), and a lost answer (a request carried out, its answer never
// delivered: LoseAnswer). Each client that a test wants to fault alone gets a Proxy of
// its own. Core's fault tests and the backends' belief tests use it; the
// root module's internal packages are importable by the nested modules
// under backends/.
package faultnet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Dir is a direction data flows through a Proxy.
type Dir int

// The directions.
const (
	Up   Dir = 0 // client to server
	Down Dir = 1 // server to client
)

// A Proxy forwards the connections made to Addr to the server, on
// 127.0.0.1, through the faults set on it. Its methods are safe for
// concurrent use. It is stopped — listener and every connection closed,
// every goroutine ended — when the test that started it ends.
type Proxy struct {
	t        testing.TB
	upstream string
	addr     string

	mu     sync.Mutex
	ln     net.Listener
	pipes  map[*pipe]struct{}
	faults [2]faults // by Dir
	reset  bool      // every connection is reset as it comes
	lose   []byte    // LoseAnswer's match, while armed
	lost   int       // answers lost by LoseAnswer
	flow   [2]chan struct{}
	wg     sync.WaitGroup
}

// faults are the faults of one direction.
type faults struct {
	latency, jitter time.Duration // each chunk waits latency ± jitter
	blackhole       bool          // chunks are dropped, connections stay open
	stalls          int           // > 0: nothing is read or forwarded
}

// A pipe is one proxied connection: the client's side and the server's.
type pipe struct {
	client, server net.Conn
	done           chan struct{} // closed when the pipe is closed
	once           sync.Once
	swallow        atomic.Bool // LoseAnswer: the next answer is lost
}

func (p *pipe) close(reset bool) {
	p.once.Do(func() {
		if reset {
			resetConn(p.client)
			resetConn(p.server)
		}
		p.client.Close()
		p.server.Close()
		close(p.done)
	})
}

// Start starts a Proxy to upstream (host:port) on a free loopback port.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultnet: %v", err)
	}
	p := &Proxy{t: t, upstream: upstream, addr: ln.Addr().String(), pipes: map[*pipe]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		for d := range p.faults {
			p.faults[d] = faults{}
			if p.flow[d] != nil {
				close(p.flow[d])
				p.flow[d] = nil
			}
		}
		p.mu.Unlock()
		p.stop()
		p.wg.Wait()
	})
	return p
}

// Addr returns the address clients connect to (127.0.0.1:port); it stays
// the same across Cut and its heal.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.upstream, time.Second)
	if err != nil {
		client.Close()
		return
	}
	pp := &pipe{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.ln == nil || p.reset { // cut or resetting since it was accepted
		p.mu.Unlock()
		pp.close(true)
		return
	}
	p.pipes[pp] = struct{}{}
	p.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { p.copy(pp, server, client, Up) })
	both.Go(func() { p.copy(pp, client, server, Down) })
	both.Wait()
	p.mu.Lock()
	delete(p.pipes, pp)
	p.mu.Unlock()
}

// copy moves data from src to dst through the faults of direction dir,
// and closes the pipe when either side ends.
func (p *Proxy) copy(pp *pipe, dst, src net.Conn, dir Dir) {
	defer pp.close(false)
	buf := make([]byte, 32<<10)
	for {
		if !p.await(pp, dir) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await(pp, dir) { // a stall that began during the read
				return
			}
			p.mu.Lock()
			f := p.faults[dir]
			p.mu.Unlock()
			if f.latency > 0 {
				d := f.latency
				if f.jitter > 0 {
					d += time.Duration(rand.Int64N(int64(2*f.jitter))) - f.jitter
				}
				time.Sleep(d)
			}
			if dir == Down && pp.swallow.Load() { // LoseAnswer: the server answered
				pp.close(true)
				return
			}
			if dir == Up {
				p.mu.Lock()
				if p.lose != nil && bytes.Contains(buf[:n], p.lose) {
					p.lose = nil
					p.lost++
					pp.swallow.Store(true)
				}
				p.mu.Unlock()
			}
			if !f.blackhole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) {
				p.t.Logf("faultnet: %v", err)
			}
			return
		}
	}
}

// await waits while direction dir is stalled; false if the pipe closed.
func (p *Proxy) await(pp *pipe, dir Dir) bool {
	for {
		p.mu.Lock()
		ch := p.flow[dir]
		p.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-pp.done:
			return false
		}
	}
}

// LoseAnswer arms a one-shot fault: the next chunk a client sends that
// contains match is forwarded, and the connection is then reset as the
// server's answer arrives, which the client never gets — a request the
// server carried out and whose answer was lost. lost reports how many
// answers were lost so far (0 or 1: the fault has not fired, or has).
func (p *Proxy) LoseAnswer(match []byte) (lost func() int) {
	p.mu.Lock()
	p.lose = bytes.Clone(match)
	n := p.lost
	p.mu.Unlock()
	return func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.lost - n
	}
}

// Delay makes each chunk of direction dir wait latency ± jitter, until
// the returned function is called.
func (p *Proxy) Delay(dir Dir, latency, jitter time.Duration) (remove func()) {
	return p.set(dir, func(f *faults) { f.latency, f.jitter = latency, jitter },
		func(f *faults) { f.latency, f.jitter = 0, 0 })
}

// Blackhole drops the data of direction dir, keeping connections open,
// until the returned function is called. The streams are then corrupt:
// what was dropped is lost.
func (p *Proxy) Blackhole(dir Dir) (remove func()) {
	return p.set(dir, func(f *faults) { f.blackhole = true }, func(f *faults) { f.blackhole = false })
}

// Stall stops forwarding in both directions without closing anything —
// the server hears nothing from the client, the client nothing from the
// server, as in a network partition or a paused process — until the
// returned function is called; then the data held (in the sockets'
// buffers) flows on in order, as TCP would deliver it after the partition
// healed. Connections made meanwhile are accepted and stall too.
func (p *Proxy) Stall() (heal func()) {
	p.mu.Lock()
	for d := range p.faults {
		p.faults[d].stalls++
		if p.flow[d] == nil {
			p.flow[d] = make(chan struct{})
		}
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for d := range p.faults {
				if p.faults[d].stalls--; p.faults[d].stalls <= 0 && p.flow[d] != nil {
					p.faults[d].stalls = 0
					close(p.flow[d])
					p.flow[d] = nil
				}
			}
		})
	}
}

func (p *Proxy) set(dir Dir, on, off func(*faults)) func() {
	p.mu.Lock()
	on(&p.faults[dir])
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		off(&p.faults[dir])
		p.mu.Unlock()
	}
}

// Reset resets every connection (TCP RST: "connection reset by peer"),
// and every new one, until the returned function is called.
func (p *Proxy) Reset() (remove func()) {
	p.mu.Lock()
	p.reset = true
	for pp := range p.pipes {
		pp.close(true)
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.reset = false
		p.mu.Unlock()
	}
}

// Cut closes every connection through the proxy and refuses new ones
// (nothing listens) until the returned function listens again on the
// same address.
func (p *Proxy) Cut() (heal func()) {
	p.stop()
	var once sync.Once
	return func() {
		once.Do(func() {
			for i := 0; ; i++ {
				ln, err := net.Listen("tcp", p.addr)
				if err == nil {
					p.serve(ln)
					return
				}
				if i == 50 {
					p.t.Errorf("faultnet: listen again on %s: %v", p.addr, err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// stop closes the listener and every connection.
func (p *Proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for pp := range p.pipes {
		pp.close(false)
	}
}

// resetConn makes c's Close send a TCP RST instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}
