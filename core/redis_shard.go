package core

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// shardSubs are a Client's sharded subscriptions (SSUBSCRIBE, Redis >= 7,
// WithShardedNotify): one connection per Cluster master (one in all off
// Cluster), subscribed to the channels of the slots that master serves. A
// script publishes in its key's slot (lib_pub_sharded.lua), so a release is
// delivered by that slot's master alone, not broadcast over the cluster
// bus to every node as PUBLISH is.
//
// go-redis's PubSub, when it reconnects, subscribes its shard channels
// again in one SSUBSCRIBE, which a Cluster refuses when they span slots
// (CROSSSLOT). So a connection whose receive fails is not left to go-redis:
// it is closed, and its channels subscribed afresh, one SSUBSCRIBE per
// slot, on the master that serves each slot now. A master that gives up a
// slot (resharding, failover) tells its subscribers with an SUNSUBSCRIBE
// they did not ask for; their connection moves the same way. Meanwhile
// waiters rely on their timers, as with any lost notification.
type shardSubs struct {
	rdb    redis.UniversalClient
	nt     *notifier
	ctx    context.Context // cancelled by the Client's Close
	loops  *sync.WaitGroup // the receive loops, waited for by close
	suffix string          // "|<grant channel>": a key's grant twin ends so
	// fallback, if set, subscribes channels with classic pub/sub, for a
	// server found to have no SSUBSCRIBE.
	fallback func(channels []string)

	mu     sync.Mutex
	nodes  map[string]*shardConn // by master address ("" off Cluster)
	where  map[string]*shardConn // the connection a channel is subscribed on
	moving map[string]bool       // channels between two connections (move)
	closed bool
}

// shardConn is one subscription connection and the channels on it.
type shardConn struct {
	addr  string
	ps    *redis.PubSub
	chans map[string]struct{}
	// send orders what is sent on ps: an SUNSUBSCRIBE (sent in the
	// background, see unsubscribe) always goes out before a later
	// SSUBSCRIBE of the same channel. Taken before shardSubs.mu.
	send sync.Mutex
	// pending counts, per channel, the SUNSUBSCRIBEs sent and not yet
	// answered (under shardSubs.mu): their replies are not a slot move.
	pending map[string]int
}

// shardMoveWait is how long a connection's channels wait before they are
// subscribed afresh after its receive failed: a refused or broken
// connection is retried at this pace.
const shardMoveWait = 200 * time.Millisecond

func (s *shardSubs) init(rdb redis.UniversalClient, nt *notifier, ctx context.Context, loops *sync.WaitGroup, grants string) {
	s.rdb, s.nt, s.ctx, s.loops = rdb, nt, ctx, loops
	s.suffix = "|" + grants
	s.nodes = make(map[string]*shardConn)
	s.where = make(map[string]*shardConn)
	s.moving = make(map[string]bool)
}

// twin is channel's grant twin, "<channel>|<grant channel>": a script's
// pub_to publishes there a grant for one of this Client's waiters. It
// shares the channel's hash tag, so it is subscribed in the same SSUBSCRIBE,
// before the channel, whose confirmation then says both are heard.
func (s *shardSubs) twin(channel string) string { return channel + s.suffix }

// master names the connection that serves channel's slot: its master's
// address on a Cluster, "" elsewhere, or the slot itself when the slot map
// cannot tell (a connection of the slot's own).
func (s *shardSubs) master(ctx context.Context, channel string) string {
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		return ""
	}
	if addr, ok := clusterMaster(ctx, s.rdb, channel); ok {
		return addr
	}
	return "slot " + strconv.Itoa(int(clusterSlot(channel)))
}

// subscribe subscribes channels, which share one hash slot, in one
// SSUBSCRIBE on the connection of their slot's master. Like SUBSCRIBE on
// the classic connection, a failure still counts: go-redis keeps the
// channels, and the connection's receive loop recovers them.
func (s *shardSubs) subscribe(ctx context.Context, channels ...string) error {
	return s.subscribeIf(ctx, false, channels)
}

// subscribeIf is subscribe; with moved, only of the channels still moving
// (an unsubscribe during a move drops them), decided under the same lock
// that registers them.
func (s *shardSubs) subscribeIf(ctx context.Context, moved bool, channels []string) error {
	addr := s.master(ctx, channels[0])
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if moved {
		var still []string
		for _, ch := range channels {
			if s.moving[ch] {
				still = append(still, ch)
			}
		}
		if channels = still; len(channels) == 0 {
			s.mu.Unlock()
			return nil
		}
	}
	sc := s.nodes[addr]
	start := sc == nil
	if start {
		sc = &shardConn{addr: addr, ps: s.rdb.SSubscribe(s.ctx), chans: make(map[string]struct{}), pending: make(map[string]int)}
		s.nodes[addr] = sc
		s.loops.Add(1) // under mu, before close can wait
	}
	for _, ch := range channels {
		sc.chans[ch] = struct{}{}
		s.where[ch] = sc
		delete(s.moving, ch)
	}
	s.mu.Unlock()
	sctx, cancel := context.WithTimeout(s.ctx, confirmWait)
	defer cancel()
	sc.send.Lock()
	err := sc.ps.SSubscribe(sctx, channels...)
	sc.send.Unlock()
	if start {
		// Only now: a receive before the first SSUBSCRIBE would connect
		// with no channel to route by, to any node.
		go s.loop(sc)
	}
	return err
}

// unsubscribe drops channels; a connection left with none is closed. It
// is called under the notifier's lock (its sweep), so it only does the
// bookkeeping and sends in the background: go-redis holds a PubSub's lock
// while it reconnects (up to its dial timeout), and the notifier must not
// wait for that. A channel subscribed again on the same connection
// meanwhile is left subscribed (send keeps the two in order).
func (s *shardSubs) unsubscribe(channels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	drop := make(map[*shardConn][]string)
	for _, ch := range channels {
		delete(s.moving, ch)
		if sc := s.where[ch]; sc != nil {
			delete(s.where, ch)
			delete(sc.chans, ch)
			drop[sc] = append(drop[sc], ch)
		}
	}
	for sc, chans := range drop {
		empty := len(sc.chans) == 0
		if empty && s.nodes[sc.addr] == sc {
			delete(s.nodes, sc.addr) // a later subscribe opens another
		}
		s.loops.Add(1)
		go s.sendUnsubscribe(sc, chans, empty)
	}
}

// sendUnsubscribe closes sc if it was left with no channel, or else sends
// SUNSUBSCRIBE for those of chans not subscribed on it again since.
func (s *shardSubs) sendUnsubscribe(sc *shardConn, chans []string, empty bool) {
	defer s.loops.Done()
	if empty {
		_ = sc.ps.Close()
		return
	}
	sc.send.Lock()
	defer sc.send.Unlock()
	s.mu.Lock()
	var gone []string
	for _, ch := range chans {
		if s.where[ch] != sc {
			gone = append(gone, ch)
			sc.pending[ch]++
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	defer cancel()
	for _, group := range bySlot(gone) {
		_ = sc.ps.SUnsubscribe(ctx, group...)
	}
}

// bySlot groups channels by hash slot.
func bySlot(channels []string) [][]string {
	idx := make(map[uint16]int)
	var groups [][]string
	for _, ch := range channels {
		sl := clusterSlot(ch)
		i, ok := idx[sl]
		if !ok {
			i = len(groups)
			idx[sl] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], ch)
	}
	return groups
}

// loop receives on sc's connection until it is closed, or fails and moves.
func (s *shardSubs) loop(sc *shardConn) {
	defer s.loops.Done()
	for {
		msg, err := sc.ps.ReceiveTimeout(s.ctx, time.Second)
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			switch {
			case errors.Is(err, redis.ErrClosed):
			case unknownCommand(err) && s.fallback != nil:
				// A server without SSUBSCRIBE, found after an undecided
				// probe (redisPubSub.shardedNow): its channels go classic.
				s.fallback(s.drop(sc))
			default:
				// Broken, or its channels refused (a moved slot, or a
				// resubscription across slots): subscribe them afresh.
				s.move(sc)
			}
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			if strings.HasSuffix(m.Channel, s.suffix) {
				s.nt.deliver(s.nt.grants, m.Payload)
			} else {
				s.nt.deliver(m.Channel, m.Payload)
			}
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				s.nt.confirm(m.Channel)
			case "sunsubscribe":
				s.mu.Lock()
				asked := sc.pending[m.Channel] > 0
				if asked {
					if sc.pending[m.Channel]--; sc.pending[m.Channel] == 0 {
						delete(sc.pending, m.Channel)
					}
				}
				ours := !asked && s.where[m.Channel] == sc
				s.mu.Unlock()
				if ours { // not asked for: the master gave the slot up
					s.move(sc)
					return
				}
			}
		}
	}
}

// take closes sc and returns the channels subscribed on it, out of the
// maps; moving marks them as moving (see move).
func (s *shardSubs) take(sc *shardConn, moving bool) []string {
	s.mu.Lock()
	if s.nodes[sc.addr] == sc {
		delete(s.nodes, sc.addr)
	}
	var chans []string
	for ch := range sc.chans {
		if s.where[ch] == sc {
			delete(s.where, ch)
			if moving {
				s.moving[ch] = true
			}
			chans = append(chans, ch)
		}
	}
	s.mu.Unlock()
	_ = sc.ps.Close()
	return chans
}

// drop closes sc and returns its channels, grant twins left out.
func (s *shardSubs) drop(sc *shardConn) []string {
	return slices.DeleteFunc(s.take(sc, false), func(ch string) bool { return strings.HasSuffix(ch, s.suffix) })
}

// move closes sc and subscribes its channels afresh, each slot on the
// master that serves it now, after shardMoveWait.
func (s *shardSubs) move(sc *shardConn) {
	chans := s.take(sc, true)
	if len(chans) > 0 {
		s.nt.interrupted(chans...)
	}
	select {
	case <-time.After(shardMoveWait):
	case <-s.ctx.Done():
		return
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(s.ctx)
	}
	for _, group := range bySlot(chans) {
		// Twins first, as subscribe orders them: a channel's confirmation
		// then says its twin is heard too.
		sortTwinsFirst(group, s.suffix)
		_ = s.subscribeIf(s.ctx, true, group)
	}
}

// sortTwinsFirst puts the grant twins (names ending in suffix) before the
// other channels.
func sortTwinsFirst(chans []string, suffix string) {
	i := 0
	for j, ch := range chans {
		if strings.HasSuffix(ch, suffix) {
			chans[i], chans[j] = chans[j], chans[i]
			i++
		}
	}
}

// close closes every connection; the loops then end.
func (s *shardSubs) close() {
	s.mu.Lock()
	s.closed = true
	var pss []*redis.PubSub
	for _, sc := range s.nodes {
		pss = append(pss, sc.ps)
	}
	s.nodes = map[string]*shardConn{}
	s.mu.Unlock()
	for _, ps := range pss {
		_ = ps.Close()
	}
}

// unknownCommand reports whether err is a server's refusal of a command it
// does not have (SPUBLISH and SSUBSCRIBE before Redis 7).
func unknownCommand(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}
