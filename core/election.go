package core

import (
	"context"
	"time"
)

// Campaign waits until this caller leads key, and returns its leadership
// as a *Lock: the lock of key, held with value as its metadata — the
// leader's announcement, which Inspect and Observe show as Info.Metadata
// (an address, a node name). Resign with Release; the leadership is lost
// when Lost closes (a renewal that failed until the lease's deadline), and
// then someone else may lead. Fence() orders the terms: every new leader's
// fence is higher than every earlier leader's, so storage that checks it
// rejects a deposed leader's late writes. The wait ends with ctx or the
// bounds given (WithWaitTimeout, WithRetryBudget), with the errors of Lock;
// a new leader is announced to observers at once.
//
// There is at most one leader at a time in the sense of the lock: a leader
// is told it lost (Lost) no later than anyone else can lead. Campaign on a
// key is Lock on it, so a Lock of the same key by a non-campaigner also
// takes the leadership (with its own metadata).
//
// Cleanup cannot go wrong the ways etcd's election's does: a campaign
// that fails or gives up leaves nothing behind (no key, no queue entry); a
// resignation runs even on a cancelled context, and one that fails leaves
// the term to end at its TTL, since nothing renews it any more; and a
// resignation only deletes its own term (compare-and-delete on the
// token), never a successor's.
func (c *Client) Campaign(ctx context.Context, key, value string, opts ...LockOption) (*Lock, error) {
	opts = append([]LockOption{WithMetadata(value), asLeader}, opts...)
	h, err := c.acquire(ctx, key, 0, opts, true)
	if err != nil {
		return nil, err
	}
	// Observers learn of the new leader now rather than at their next
	// poll; a failed announcement costs them only that delay. It runs in
	// the background, so that a slow or dead node (Redlock) never delays
	// the new leader.
	channel, payload := h.l.n.lease, leaderPrefix+h.Token()
	c.wd.goCounted(func() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = c.be.announce(actx, channel, payload)
	})
	return h, nil
}

// observerChannel is where a release that sent its grant to the
// grantee's own channel also tells observers of lease (see release.lua).
func observerChannel(lease string) string { return lease + ":o" }

// asLeader marks an acquisition as a Campaign's (KindLeader).
var asLeader = lockOption(func(s *settings) { s.kind = KindLeader })

// observePoll bounds how long Observe goes without asking while nobody
// leads: a leader that took the key with Lock, not Campaign, is announced
// to nobody and is seen within this much time.
const observePoll = 2 * time.Second

// Observe reports who leads key: it sends the current state at once, then
// every change of leader — a new holder, or none (Held false, after a
// Release or when a crashed leader's lease expired). Each Info is what
// Inspect returns. Observers are woken by Campaign's announcements and by
// releases; they also ask again when the leader's lease would expire, and
// every observePoll (two seconds) while nobody leads, so a change is seen
// even when a message is missed. A change that lasts shorter than it takes
// to ask (a leader that resigns at once) may go unseen; the order of those
// seen is the order they happened. While the backend cannot be reached,
// Observe keeps trying and sends nothing. The channel is closed when ctx
// ends or the Client is closed; a slow receiver delays the next report,
// which then tells the state of that moment. An invalid key closes the
// channel at once.
//
// On Redlock, a leader's write that the network held back (its
// acquisition's, on a node that did not answer in time, or a renewal's
// re-creation of the lease on a node that had lost it) can land after a
// later leader left that node; a majority may then name the earlier leader
// again, until that write's TTL runs out, and Observe reports it, although
// it no longer believes it leads. Nobody can take the key meanwhile.
func (c *Client) Observe(ctx context.Context, key string) <-chan Info {
	out := make(chan Info)
	go c.observe(ctx, key, out)
	return out
}

func (c *Client) observe(ctx context.Context, key string, out chan<- Info) {
	defer close(out)
	if validKey(key) != nil {
		return
	}
	n := c.names(key)
	lease := n.lease
	w := c.nt.watch(ctx, lease)
	defer c.nt.leave(w, true)
	// A release that grants the key to a queued waiter tells the
	// grantee's Client on its own channel, and observers here.
	wo := c.nt.watch(ctx, observerChannel(lease))
	defer c.nt.leave(wo, true)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last, pending Info
	sent, waiting := false, false // waiting: pending is to be sent
	// On a backend whose releases tell only keys marked as waited for,
	// the observer marks the key before it reads it, and again well
	// before the mark lapses; a mark found lapsed means a release may have
	// gone untold, and the key is read at once.
	mk, _ := c.be.(waitMarker)
	var markDue, readAt time.Time // zero: now
	for {
		var send chan<- Info
		if waiting {
			send = out
		}
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case send <- pending:
			last, sent, waiting = pending, true, false
			continue
		case <-w.wake:
			readAt = time.Time{}
		case <-wo.wake:
			readAt = time.Time{}
		case <-timer.C:
		}
		if now := time.Now(); mk != nil && !now.Before(markDue) {
			lapsed, err := mk.mark(ctx, n)
			markDue = now.Add(waitMarkTTL() / 3)
			if err != nil {
				markDue = now.Add(time.Second)
			} else if lapsed {
				readAt = time.Time{}
			}
			if time.Now().Before(readAt) { // woken to mark alone
				resetTimer(timer, min(time.Until(readAt), time.Until(markDue)))
				continue
			}
		}
		// Read again on every wake-up, also while a report waits for a
		// slow receiver: it gets the state of the moment it takes it.
		info, err := c.Inspect(ctx, key)
		next := observePoll
		switch {
		case err != nil:
			next = time.Second
		case info.granted:
			// A fair waiter was granted the key and has not claimed it:
			// not a leader yet. Its claim (or the grant's expiry) comes
			// within the claim window.
			next = min(info.TTL, 50*time.Millisecond) + time.Millisecond
		default:
			// A change is a new holder, or none, or a new announcement.
			// (The same holder read twice may show another fence on
			// Redlock, whose nodes answer Inspect one by one while the
			// fence is written back: that is no change.)
			pending = info
			waiting = !sent || info.Held != last.Held ||
				info.Held && (info.Token != last.Token || info.Metadata != last.Metadata)
			if info.Held && info.TTL >= 0 {
				next = info.TTL + 5*time.Millisecond // a release wakes us sooner
			}
		}
		readAt = time.Now().Add(next)
		if mk != nil {
			next = min(next, time.Until(markDue))
		}
		resetTimer(timer, next)
	}
}

// resetTimer stops t, drains it, and resets it to d.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

// A waitMarker is a backend whose releases tell only keys marked as
// waited for (Redis: see scripts/release.lua).
type waitMarker interface {
	// mark marks n's lease as waited for, for waitMarkTTL; lapsed is
	// true when it was not marked.
	mark(ctx context.Context, n names) (lapsed bool, err error)
}
