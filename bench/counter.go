package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter counts what a driver sends to Redis, in two independent ways.
//
//   - Hook counts: a redis.Hook on every client the driver uses. ProcessHook
//     adds one command and one round trip; ProcessPipelineHook adds one command
//     per queued command and one round trip per pipeline. In go-redis v9.23 a
//     new connection's handshake (HELLO, CLIENT SETINFO) also runs through the
//     hooks. What a PubSub connection sends (SUBSCRIBE, UNSUBSCRIBE, its
//     health-check PINGs) does not, so hooks miss it.
//   - Wire counts: the DialHook wraps each new connection, including PubSub
//     connections, and parses the RESP it writes. This sees every command on
//     every connection. Received pub/sub messages are not commands and are
//     never counted.
//
// Counters are cumulative; scenarios take a snapshot before and after the
// measured window and report the difference.
type Counter struct {
	cmds  atomic.Int64
	trips atomic.Int64
	wire  atomic.Int64
	dials atomic.Int64
}

// Counts is a snapshot (or a difference of snapshots) of a Counter.
type Counts struct {
	Cmds  int64 // commands seen by process/pipeline hooks
	Trips int64 // round trips seen by hooks: one per command or pipeline
	Wire  int64 // commands written on any connection, parsed from RESP
	Dials int64 // connections opened
}

// Snapshot returns the current totals. A nil Counter yields zero counts.
func (c *Counter) Snapshot() Counts {
	if c == nil {
		return Counts{}
	}
	return Counts{Cmds: c.cmds.Load(), Trips: c.trips.Load(), Wire: c.wire.Load(), Dials: c.dials.Load()}
}

// Sub returns a-b.
func (a Counts) Sub(b Counts) Counts {
	return Counts{Cmds: a.Cmds - b.Cmds, Trips: a.Trips - b.Trips, Wire: a.Wire - b.Wire, Dials: a.Dials - b.Dials}
}

// Instrument installs the counting hook on a client.
func (c *Counter) Instrument(rdb redis.UniversalClient) { rdb.AddHook(counterHook{c}) }

type counterHook struct{ c *Counter }

func (h counterHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		h.c.dials.Add(1)
		return &wireConn{Conn: conn, c: h.c}, nil
	}
}

func (h counterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.cmds.Add(1)
		h.c.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (h counterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.cmds.Add(int64(len(cmds)))
		h.c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// wireConn counts the commands written on one connection.
type wireConn struct {
	net.Conn
	c  *Counter
	mu sync.Mutex
	p  respScanner
}

func (w *wireConn) Write(b []byte) (int, error) {
	w.mu.Lock()
	if n := w.p.feed(b); n > 0 {
		w.c.wire.Add(int64(n))
	}
	w.mu.Unlock()
	return w.Conn.Write(b)
}

// NetConn lets go-redis reach the TCP connection for its health checks, so
// wrapping does not change how the pool behaves.
func (w *wireConn) NetConn() net.Conn { return w.Conn }

// respScanner counts top-level commands in a stream of client-to-server RESP:
// arrays of bulk strings, or inline commands. It keeps its state across
// writes, so a command split over several writes is counted once.
type respScanner struct {
	state int    // scanCmd, scanElem or scanBulk
	line  []byte // partial header line
	elems int    // bulk strings left in the current command
	bulk  int    // bytes left in the current bulk string, CRLF included
}

const (
	scanCmd  = iota // expecting "*N\r\n" or an inline command
	scanElem        // expecting "$N\r\n"
	scanBulk        // inside a bulk string's payload
)

func (p *respScanner) feed(b []byte) (cmds int) {
	for len(b) > 0 {
		if p.state == scanBulk {
			k := min(p.bulk, len(b))
			p.bulk -= k
			b = b[k:]
			if p.bulk == 0 {
				p.endElem()
			}
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			return cmds
		}
		line := b[:i+1]
		if len(p.line) > 0 {
			line = append(p.line, line...)
		}
		b = b[i+1:]
		p.line = p.line[:0]
		cmds += p.header(bytes.TrimRight(line, "\r\n"))
	}
	return cmds
}

func (p *respScanner) header(line []byte) int {
	n := -1
	if len(line) > 1 {
		if v, err := strconv.Atoi(string(line[1:])); err == nil {
			n = v
		}
	}
	switch {
	case p.state == scanCmd && len(line) > 0 && line[0] == '*':
		if n > 0 {
			p.elems, p.state = n, scanElem
		}
		return 1
	case p.state == scanCmd:
		if len(line) > 0 {
			return 1 // inline command
		}
	case len(line) > 0 && line[0] == '$' && n >= 0:
		p.bulk, p.state = n+2, scanBulk
	default:
		p.endElem() // not a bulk string: count it as one element
	}
	return 0
}

func (p *respScanner) endElem() {
	p.elems--
	if p.elems > 0 {
		p.state = scanElem
	} else {
		p.elems, p.state = 0, scanCmd
	}
}
