package zklock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/backends/zklock"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/core/locktest"
)

// The conformance suite: each subtest's Client has a session of its own.
func TestConformance(t *testing.T) {
	server(t)
	locktest.Run(t, func(t *testing.T) *core.Client { return newClient(t) })
}

func TestCapabilities(t *testing.T) {
	c := newClient(t)
	if got, want := c.Capabilities(), core.CapFair|core.CapNotify|core.CapClaims; got != want {
		t.Fatalf("Capabilities: %s, want %s", got, want)
	}
}

func TestOptions(t *testing.T) {
	// New does no I/O: a connection that never connects will do.
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := zklock.WithSessionTimeout(time.Minute)
	for name, tc := range map[string]struct {
		conn *zk.Conn
		opts []zklock.Option
	}{
		"nil conn":           {nil, []zklock.Option{st}},
		"no session timeout": {conn, nil},
		"short session":      {conn, []zklock.Option{zklock.WithSessionTimeout(time.Millisecond)}},
		"relative root":      {conn, []zklock.Option{st, zklock.WithRoot("locks")}},
		"slash root":         {conn, []zklock.Option{st, zklock.WithRoot("/")}},
		"trailing slash":     {conn, []zklock.Option{st, zklock.WithRoot("/locks/")}},
		"double slash":       {conn, []zklock.Option{st, zklock.WithRoot("/a//b")}},
		"dot component":      {conn, []zklock.Option{st, zklock.WithRoot("/a/../b")}},
		"control character":  {conn, []zklock.Option{st, zklock.WithRoot("/a\x01")}},
		"empty ACL":          {conn, []zklock.Option{st, zklock.WithACL()}},
		"core option":        {conn, []zklock.Option{st, zklock.WithClientOptions(core.WithKeyPrefix(""))}},
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := zklock.New(tc.conn, tc.opts...); !errors.Is(err, core.ErrInvalidOption) || c != nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
	// The default TTL fits the session; a longer one is refused before
	// anything is sent.
	c, err := zklock.New(conn, zklock.WithSessionTimeout(3*time.Second), zklock.WithRoot("/a/b.c"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.TryLock(context.Background(), "k", core.WithTTL(3*time.Second))
	if !errors.Is(err, core.ErrInvalidTTL) || errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("a TTL above two thirds of the session: %v, want ErrInvalidTTL", err)
	}
}

// Two sessions, as two processes: a release in one wakes the other's
// waiter by its watch (the lease lasts a minute and the retry budget is
// 2), the fair queue spans both, and a token's lease cannot be re-entered
// from a session that does not hold it.
func TestAcrossSessions(t *testing.T) {
	a, b := newClient(t), newClient(t)
	ctx := ctxT(t)
	held, err := a.TryLock(ctx, "across", core.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "across", core.WithToken(held.Token())); !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("re-entry from another session: %v, want a refusal", err)
	}
	got := make(chan *core.Lock, 2)
	for _, c := range []*core.Client{b, a} {
		go func() {
			l, err := c.Lock(ctx, "across", core.WithFair(), core.WithWaitTimeout(20*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(200 * time.Millisecond) // queued in this order
	}
	waitInfo(t, a, "across", func(i core.Info) bool { return i.Waiters == 2 })
	mustRelease(t, held)
	first := <-got
	if first == nil {
		t.FailNow()
	}
	info, _ := a.Inspect(ctx, "across")
	if info.Token != first.Token() || first.Fence() <= held.Fence() {
		t.Fatalf("first after the release: %+v, fence %d after %d", info, first.Fence(), held.Fence())
	}
	mustRelease(t, first)
	second := <-got
	if second == nil {
		t.FailNow()
	}
	if second.Fence() <= first.Fence() {
		t.Fatalf("fence %d after %d", second.Fence(), first.Fence())
	}
	mustRelease(t, second)
}

// A session cut off from the server expires there; its holder is told
// (Lost) before the key can be taken, and the next holder's fence is
// higher. The holder's session runs through a proxy that the test cuts.
func TestSessionExpiry(t *testing.T) {
	s := server(t)
	p := startProxy(t, s.addr)
	const timeout = 3 * time.Second // leases of up to 2 s
	holderConn := connect(t, p.addr(), timeout)
	holder, err := zklock.New(holderConn, zklock.WithSessionTimeout(timeout), zklock.WithRoot(testRoot))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	rival := newClient(t)
	ctx := ctxT(t)
	l, err := holder.TryLock(ctx, "expiry") // the default TTL: 2 s
	if err != nil {
		t.Fatal(err)
	}
	var lostAt time.Time
	lost := make(chan struct{})
	go func() {
		<-l.Lost()
		lostAt = time.Now()
		close(lost)
	}()
	time.Sleep(time.Second) // a renewal or two
	cut := time.Now()
	p.cut()
	got, err := rival.Lock(ctx, "expiry", core.WithWaitTimeout(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	takenAt := time.Now()
	defer mustRelease(t, got)
	select {
	case <-lost:
	default:
		t.Fatalf("the rival took the key %v after the cut, and the holder was not told", takenAt.Sub(cut))
	}
	if !lostAt.Before(takenAt) {
		t.Fatalf("told %v after the takeover", lostAt.Sub(takenAt))
	}
	if !errors.Is(l.Err(), core.ErrLost) || got.Fence() <= l.Fence() {
		t.Fatalf("Err %v; fence %d after %d", l.Err(), got.Fence(), l.Fence())
	}
	t.Logf("cut at 0, holder told at %v, key taken at %v (fences %d then %d)",
		lostAt.Sub(cut).Round(time.Millisecond), takenAt.Sub(cut).Round(time.Millisecond), l.Fence(), got.Fence())
}

// A server restart (killed, started again on the same data) while a lock
// is held: the session survives it, and so does the lease — or, if the
// restart outlasted it, its holder is told — never both holders at once.
// Fences go on rising.
func TestServerRestart(t *testing.T) {
	s := server(t)
	const timeout = 30 * time.Second // leases of up to 20 s
	conn := connect(t, s.addr, timeout)
	c, err := zklock.New(conn, zklock.WithSessionTimeout(timeout), zklock.WithRoot(testRoot))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	l, err := c.TryLock(ctx, "restart", core.WithTTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.kill()
	if err := s.start(); err != nil {
		srvErr = err // later tests skip, saying why
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for conn.State() != zk.StateHasSession && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-l.Lost():
		t.Fatalf("the lease was lost across a restart shorter than its TTL: %v", l.Err())
	default:
	}
	if err := l.Extend(ctx, 15*time.Second); err != nil {
		t.Fatalf("Extend after the restart: %v", err)
	}
	other := newClient(t)
	if _, err := other.TryLock(ctx, "restart"); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("TryLock of the held key after the restart: %v", err)
	}
	mustRelease(t, l)
	next, err := other.TryLock(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", next.Fence(), l.Fence())
	}
	mustRelease(t, next)
}

// The reaper: a lease nobody renews is deleted at its TTL, by the holder's
// process, after the holder was told; a key abandoned that way is free.
func TestUnrenewedLeaseIsDeleted(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	l, err := c.TryLock(ctx, "unrenewed", core.WithTTL(300*time.Millisecond), core.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	waitInfo(t, c, "unrenewed", func(i core.Info) bool { return !i.Held && i.Fence >= l.Fence() })
}

func waitInfo(t *testing.T, c *core.Client, key string, cond func(core.Info) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if cond(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect: %+v", info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustRelease(t *testing.T, l *core.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A proxy between a client and the server, which the test can cut: every
// connection is closed and no new one is accepted.
type proxy struct {
	l     net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, to string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, to: to}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
	}
}

func (p *proxy) cut() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
