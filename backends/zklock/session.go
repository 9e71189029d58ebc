package zklock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// queueIdle is how long a queued node of this process may go without its
// waiter asking again before the reaper deletes it. core re-asks at least
// every second (and releases the node when it gives up); this catches a
// waiter whose release failed, so that it cannot block the queue for as
// long as the session lives.
const queueIdle = 10 * time.Second

// reapRetry is how soon a deletion the server did not confirm is tried
// again.
const reapRetry = time.Second

// A session is the bookkeeping shared by every backend on one *zk.Conn:
// the nodes this process created in that connection's session, with the
// local deadline of each held one. Its reaper deletes a held node when its
// lease's TTL passed without an extension (by this process's clock, after
// the holder stopped believing it) and a queued node whose waiter stopped
// asking.
type session struct {
	conn *zk.Conn
	refs int // backends using it; guarded by sessionsMu

	mu     sync.Mutex
	byPath map[string]*entry
	byTok  map[string]*entry // tokKey(key, token)
	poke   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// An entry is one node of this process.
type entry struct {
	key, token, path string
	sid              int64 // the session that created it
	held             bool  // acquired (else queued)
	dead             bool  // the reaper gave it up; its deletion is being retried
	fence            int64 // czxid, when held
	meta             string
	deadline         time.Time // held: when the reaper deletes it
	asked            time.Time // queued: the waiter's last Acquire
}

func tokKey(key, token string) string { return key + "\x00" + token }

var (
	sessionsMu sync.Mutex
	sessions   = map[*zk.Conn]*session{}
)

// openSession returns conn's session bookkeeping, starting its reaper for
// the first backend.
func openSession(conn *zk.Conn) *session {
	sessionsMu.Lock()
	defer sessionsMu.Unlock()
	s := sessions[conn]
	if s == nil {
		s = &session{
			conn: conn, byPath: map[string]*entry{}, byTok: map[string]*entry{},
			poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		}
		sessions[conn] = s
		go s.reap()
	}
	s.refs++
	return s
}

// release drops a backend's reference; the last one stops the reaper and
// deletes the nodes left (their holders were told they lost them when
// their Clients closed), bounded.
func (s *session) release() {
	sessionsMu.Lock()
	s.refs--
	last := s.refs == 0
	if last {
		delete(sessions, s.conn)
	}
	sessionsMu.Unlock()
	if !last {
		return
	}
	close(s.stop)
	<-s.done
	s.mu.Lock()
	var paths []string
	for p := range s.byPath {
		paths = append(paths, p)
	}
	s.byPath, s.byTok = map[string]*entry{}, map[string]*entry{}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range paths {
		_, _ = call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(p, -1) })
	}
}

func (s *session) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// lookup returns the live entry of key's token, or nil.
func (s *session) lookup(key, token string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byTok[tokKey(key, token)]; e != nil {
		c := *e
		return &c
	}
	return nil
}

// isDead reports whether path is a node this process gave up.
func (s *session) isDead(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byPath[path]
	return e != nil && e.dead
}

// put records e (a new node, or a new state of one).
func (s *session) put(e *entry) {
	s.mu.Lock()
	if old := s.byTok[tokKey(e.key, e.token)]; old != nil && old.path != e.path {
		delete(s.byPath, old.path)
	}
	s.byPath[e.path] = e
	s.byTok[tokKey(e.key, e.token)] = e
	s.mu.Unlock()
	s.wake()
}

// drop forgets path (deleted).
func (s *session) drop(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byPath[path]; e != nil {
		delete(s.byPath, path)
		if s.byTok[tokKey(e.key, e.token)] == e {
			delete(s.byTok, tokKey(e.key, e.token))
		}
	}
}

// extend moves the deadline of the held node path to the later of the
// current one and now+ttl, and returns it; ok is false if the node is no
// longer live here (the reaper took it).
func (s *session) extend(path string, now time.Time, ttl time.Duration) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byPath[path]
	if e == nil || e.dead || !e.held {
		return time.Time{}, false
	}
	if d := now.Add(ttl); d.After(e.deadline) {
		e.deadline = d
	}
	return e.deadline, true
}

// holderTTL is the time left of path if it is a node this process holds,
// else -1.
func (s *session) holderTTL(path string, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byPath[path]; e != nil && e.held && !e.dead {
		return max(e.deadline.Sub(now), time.Millisecond)
	}
	return -1
}

// queuedHead returns the first node in kids (sorted) that this process
// queued, after the lowest; "" if none.
func (s *session) queuedHead(kids []child) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(kids); i++ {
		if e := s.byPath[kids[i].path]; e != nil && !e.held && !e.dead {
			return kids[i].path
		}
	}
	return ""
}

// queuedToken returns the token of path if it is a node this process
// queued, else "".
func (s *session) queuedToken(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byPath[path]; e != nil && !e.held && !e.dead {
		return e.token
	}
	return ""
}

// due returns the entries whose time has come, marking them dead, and
// when the next one is due.
func (s *session) due(now time.Time) ([]*entry, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*entry
	next := now.Add(time.Hour)
	for _, e := range s.byPath {
		at := e.deadline
		if !e.held {
			at = e.asked.Add(queueIdle)
		}
		if !at.After(now) {
			if !e.dead {
				e.dead = true
				if s.byTok[tokKey(e.key, e.token)] == e {
					delete(s.byTok, tokKey(e.key, e.token))
				}
			}
			e.deadline, e.held = now.Add(reapRetry), true // retried until deleted
			out = append(out, e)
			at = e.deadline
		}
		if at.Before(next) {
			next = at
		}
	}
	return out, next
}

// reap deletes expired nodes until stop.
func (s *session) reap() {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		expired, next := s.due(time.Now())
		for _, e := range expired {
			ctx, cancel := context.WithTimeout(context.Background(), reapRetry)
			_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(e.path, -1) })
			cancel()
			if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) {
				s.drop(e.path)
			}
		}
		if len(expired) > 0 {
			continue // deleting took time: look again
		}
		t.Reset(time.Until(next))
		select {
		case <-s.stop:
			return
		case <-s.poke:
			t.Stop()
		case <-t.C:
		}
	}
}
