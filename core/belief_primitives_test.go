package core_test

// The belief checker for the primitives: the promise of the lock — a
// holder is told no later than anyone else can take its place — for a
// semaphore's permits, a read-write lock's holds and an election's
// leaders, under the faults of belief_test.go (one key's commands stalled
// on one Client, Clients closed under renewal, Redlock nodes paused).
// Workers take holds through several Clients, hold them (often across
// renewals), sometimes extend them, sometimes re-enter them with
// WithToken on the same Client, and give them back; each hold's belief
// interval is [acquired, min(Release called, Lost closed)], the loss time
// coming from the Observer (LeaseLost, right after Lost closed) through a
// slot the acquisition's context carries. The allowance is belief_test.go's:
// the lease's drift margin plus beliefSlack.
//
// Referees, per primitive:
//
//   - semaphore (limit 3; a fifth of the calls ask for 2 — callers that
//     disagree on the limit): at no instant do more than 3 holders believe
//     in permits of one key; a permit granted under limit L found fewer
//     than L earlier permits (lower fences) still believed; a sampler
//     reading Redis never finds more than 3 live permits, nor a holder
//     believing across a sample that does not list its token; fences are
//     unique and rise in the order of acquisition (real time);
//   - read-write lock: a write belief overlaps no other belief of the key
//     (read or write) — reads may overlap each other; Redis never shows a
//     writer and a live reader at once, and every belief across a sample
//     is listed, with its kind; write fences rise in real-time order, a
//     read after a write carries at least its fence, a write after a read
//     a higher one;
//   - leader (Campaign, Release, Lost): the mutex referees of
//     belief_test.go (overlap, truth, porcupine) — at most one believed
//     leader per key — and, for Observe on a separate, healthy Client:
//     its reports name leaders that campaigned, in the order of their
//     terms (fences), with their fences; it never reports a state that
//     a belief spanning the report's whole window contradicts (a leader
//     who had resigned, nobody while someone led); and it sees every
//     leader that led longer than its poll (observePoll) and a margin.
//
// Redlock has no semaphores or read-write locks (ErrInvalidOption): those
// runs are skipped there; leadership runs on it. LATCHKEY_SEED and
// LATCHKEY_BELIEF_DURATION work as for belief_test.go; without the latter
// each primitive runs primBeliefDefault per topology.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/redis/go-redis/v9"
)

// primBeliefDefault is each primitive's run per topology in make ci: three
// primitives on two topologies and leadership on Redlock stay under a
// minute.
const primBeliefDefault = 6 * time.Second

// semLimit is the semaphore's limit; semLowLimit the one a fifth of the
// calls ask for instead.
const (
	semLimit    = 3
	semLowLimit = 2
)

// What a primitive run exercises.
const (
	primSemaphore = "semaphore"
	primRWMutex   = "rwmutex"
	primLeader    = "leader"
)

// The kinds of holds.
const (
	holdPermit = "permit"
	holdRead   = "read"
	holdWrite  = "write"
	holdLeader = "leader"
)

func TestBeliefPrimitivesStandalone(t *testing.T) {
	faultTest(t)
	runPrimitives(t, standaloneBelief(t), false)
}

func TestBeliefPrimitivesCluster(t *testing.T) {
	faultTest(t)
	runPrimitives(t, clusterBelief(t), false)
}

func TestBeliefPrimitivesRedlock(t *testing.T) {
	faultTest(t)
	runPrimitives(t, redlockBelief(t), true)
}

func runPrimitives(t *testing.T, topo beliefTopology, redlock bool) {
	for _, prim := range []string{primSemaphore, primRWMutex, primLeader} {
		t.Run(prim, func(t *testing.T) {
			if redlock && prim != primLeader {
				t.Skipf("Redlock has no %s (ErrInvalidOption): they need NewRedis or NewMemory", prim)
			}
			runPrimBelief(t, topo, prim, redlock)
		})
	}
}

func primDuration(t *testing.T) time.Duration {
	if os.Getenv("LATCHKEY_BELIEF_DURATION") != "" {
		return beliefDuration(t)
	}
	return primBeliefDefault
}

// A primBelief is one hold's belief.
type primBelief struct {
	belief
	kind     string
	limit    int           // a permit's: the limit it was taken under
	value    string        // a leader's announcement
	released time.Duration // when a Release that succeeded returned (0: none)
	reentry  bool          // taken with WithToken of a hold this worker has
}

// id names the holder: its token; a Semaphore.Do's (whose token is not
// shown), a name of its own.
func (b primBelief) id() string {
	if b.token != "" {
		return b.token
	}
	return b.value
}

// allowance is how long a belief may outlast the hold's end on the server.
func (b primBelief) allowance() time.Duration { return margin(b.ttl) + beliefSlack }

// A holder is one live hold that a sample found in Redis.
type holder struct{ token, kind string }

// A holdersSample is what Redis held, by key index, between sent and got.
type holdersSample struct {
	sent, got time.Duration
	holders   [][]holder
}

// An observed report of Observe.
type observed struct {
	key  string
	at   time.Duration
	info core.Info
}

type primRun struct {
	*beliefRun
	prim    string
	redlock bool

	// guarded by beliefRun.mu
	holds     []primBelief
	hsamples  []holdersSample
	campaigns map[string]time.Duration // leader announcements, by value: when Campaign was called
	reports   []observed
}

func runPrimBelief(t *testing.T, topo beliefTopology, prim string, redlock bool) {
	seed := beliefSeed(t)
	keys := 2 // three permits each
	switch prim {
	case primRWMutex:
		keys = 4 // one writer per key: as many keys as the mutex run
	case primLeader:
		keys = 6 // one leader per key, and long terms: fewer waits that time out
	}
	p := &primRun{beliefRun: newBeliefRun(t, topo, keys), prim: prim, redlock: redlock, campaigns: map[string]time.Duration{}}
	p.storage = func(key string) string { return p.storageName(key) }
	var stopObserving func()
	if prim == primLeader {
		stopObserving = p.observe()
	}
	sample := p.sampleHolders
	if prim == primLeader {
		sample = p.sample // the mutex's sampler reads the leases
	}
	faults := p.run(seed, primDuration(t), p.worker, sample)
	if stopObserving != nil {
		stopObserving()
	}
	switch prim {
	case primSemaphore:
		p.judgeSemaphore(faults)
	case primRWMutex:
		p.judgeRWMutex(faults)
	case primLeader:
		p.judgeLeader(faults)
	}
}

// storageName is the Redis key of key that holds the primitive's holds
// (and that the injector stalls the commands of).
func (p *primRun) storageName(key string) string {
	base := p.prefix + ":{" + key + "}"
	switch p.prim {
	case primSemaphore:
		return base + ":sem"
	case primRWMutex:
		return base + ":rw"
	}
	return base
}

// A taken hold, until its belief is recorded.
type taken struct {
	l    *core.Lock
	slot *lossSlot
	b    primBelief
}

// worker takes a hold of a random key through a random Client, holds it
// for a random time (often across renewals), sometimes extends it,
// sometimes re-enters it with its token on the same Client, and gives it
// back; a fifth of a semaphore's workers' turns go through Semaphore.Do.
func (p *primRun) worker(ctx context.Context, rng *rand.Rand) {
	ttls := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	for ctx.Err() == nil {
		c := p.client(rng)
		key := p.keys[rng.IntN(len(p.keys))]
		ttl := ttls[rng.IntN(len(ttls))]
		if p.prim == primSemaphore && rng.IntN(5) == 0 {
			p.semDo(ctx, rng, c, key, ttl)
			continue
		}
		h, err := p.take(ctx, rng, c, key, ttl, nil)
		if err != nil {
			p.count(p.prim + " error: " + beliefCause(err))
			if !errors.Is(err, core.ErrNotAcquired) && !errors.Is(err, core.ErrClosed) {
				time.Sleep(10 * time.Millisecond) // an outage: do not spin
			}
			continue
		}
		p.count("acquired")
		p.count("acquired " + h.b.kind)
		var twin *taken
		if p.prim != primLeader && rng.IntN(8) == 0 {
			if twin, err = p.take(ctx, rng, c, key, ttl, h); err != nil {
				p.count("re-entry error: " + beliefCause(err))
			} else if twin.b.fence == h.b.fence {
				p.count("re-entered")
			} else {
				// The hold was gone when the call (held back by a fault)
				// reached Redis: WithToken took the key afresh, a hold
				// of its own that the referees judge as such.
				p.count("re-entry took the key afresh")
				twin.b.reentry = false
			}
		}
		var hold time.Duration
		extend := false
		switch q := rng.IntN(20); {
		case p.prim == primLeader && q < 2: // longer than Observe's poll
			hold = 2600*time.Millisecond + rand.N(1200*time.Millisecond)
		case q < 10:
			hold = rand.N(ttl / 2)
		case q < 16:
			hold = ttl + rand.N(2*ttl) // across renewals
		default:
			hold, extend = rand.N(ttl/2), true
		}
		p.holdUntil(ctx, h.l, hold)
		if extend && h.l.Err() == nil {
			to := ttls[rng.IntN(len(ttls))]
			h.b.ttl = max(h.b.ttl, to) // the margin of the longest interval confirmed
			if err := h.l.Extend(context.Background(), to); err != nil {
				p.count("extend error: " + beliefCause(err))
			}
			p.holdUntil(ctx, h.l, rand.N(ttl))
		}
		// Either handle's Release gives the server's hold back; the other
		// is told first (Lost), so its belief ends then.
		first, second := h, twin
		if twin != nil && rng.IntN(2) == 0 {
			first, second = twin, h
		}
		p.release(first)
		if second != nil {
			p.release(second)
		}
	}
}

// holdUntil holds l for d, until it is lost or the run ends.
func (p *primRun) holdUntil(ctx context.Context, l *core.Lock, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.Lost():
	case <-ctx.Done():
	}
}

// take acquires a hold of key (like: re-enters like's hold with its token,
// kind and limit, with one attempt).
func (p *primRun) take(ctx context.Context, rng *rand.Rand, c *core.Client, key string, ttl time.Duration, like *taken) (*taken, error) {
	actx, slot := withLossSlot(ctx)
	opts := []core.LockOption{core.WithTTL(ttl), core.WithWaitTimeout(time.Second)}
	try := rng.IntN(5) == 0
	b := primBelief{belief: belief{key: key, ttl: ttl}}
	switch {
	case like != nil:
		opts = append(opts, core.WithToken(like.l.Token()))
		try = true
		b.kind, b.limit, b.reentry = like.b.kind, like.b.limit, true
	case p.prim == primSemaphore:
		b.kind, b.limit = holdPermit, semLimit
		if rng.IntN(5) == 0 {
			b.limit = semLowLimit
		}
	case p.prim == primRWMutex:
		b.kind = holdRead
		if rng.IntN(20) < 7 {
			b.kind = holdWrite
		}
	default:
		b.kind = holdLeader
		b.value = fmt.Sprintf("node-%016x", rng.Uint64())
	}
	call := time.Now()
	var l *core.Lock
	var err error
	switch b.kind {
	case holdPermit:
		sem := c.Semaphore(key, b.limit)
		if try {
			l, err = sem.TryAcquire(actx, opts...)
		} else {
			l, err = sem.Acquire(actx, opts...)
		}
	case holdRead:
		if try {
			l, err = c.RWMutex(key).TryRLock(actx, opts...)
		} else {
			l, err = c.RWMutex(key).RLock(actx, opts...)
		}
	case holdWrite:
		if try {
			l, err = c.RWMutex(key).TryLock(actx, opts...)
		} else {
			l, err = c.RWMutex(key).Lock(actx, opts...)
		}
	case holdLeader:
		p.mu.Lock()
		p.campaigns[b.value] = p.since(call)
		p.mu.Unlock()
		l, err = c.Campaign(actx, key, b.value, opts...)
	}
	from := time.Now()
	if err != nil {
		return nil, err
	}
	b.fence, b.token = l.Fence(), l.Token()
	b.call, b.from = p.since(call), p.since(from)
	return &taken{l: l, slot: slot, b: b}, nil
}

// release gives h back and records its belief.
func (p *primRun) release(h *taken) {
	end := time.Now()
	err := h.l.Release(context.Background())
	done := time.Now()
	if err != nil {
		p.count("release error: " + beliefCause(err))
	}
	b := h.b
	b.how = "released"
	if at, ok := h.slot.get(); ok && at.Before(end) {
		end, b.how = at, "lost"
		p.count("lost")
	} else if err == nil {
		b.released = p.since(done)
	}
	b.to = max(p.since(end), b.from)
	p.record(b)
}

func (p *primRun) record(b primBelief) {
	p.mu.Lock()
	p.holds = append(p.holds, b)
	if b.kind == holdLeader { // the mutex referees judge leaders
		p.beliefs = append(p.beliefs, b.belief)
	}
	p.mu.Unlock()
}

// semDo holds a permit through Semaphore.Do: the belief ends when the
// callback returns or its context is cancelled with ErrLost.
func (p *primRun) semDo(ctx context.Context, rng *rand.Rand, c *core.Client, key string, ttl time.Duration) {
	actx, slot := withLossSlot(ctx)
	b := primBelief{belief: belief{key: key, ttl: ttl}, kind: holdPermit, limit: semLimit, value: fmt.Sprintf("do-%016x", rng.Uint64())}
	if rng.IntN(5) == 0 {
		b.limit = semLowLimit
	}
	hold := rand.N(2 * ttl)
	call := time.Now()
	var from, end time.Time
	ran, held := false, false
	err := c.Semaphore(key, b.limit).Do(actx, func(ctx context.Context) error {
		from, ran = time.Now(), true
		if b.fence, held = core.FenceFromContext(ctx); !held {
			return nil // lost before the callback ran: no belief
		}
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), core.ErrLost) {
				p.count("do: cancelled by " + beliefCause(context.Cause(ctx)))
			}
		}
		end = time.Now()
		return nil
	}, core.WithTTL(ttl), core.WithWaitTimeout(time.Second))
	if !ran {
		p.count(p.prim + " error: " + beliefCause(err))
		if !errors.Is(err, core.ErrNotAcquired) && !errors.Is(err, core.ErrClosed) {
			time.Sleep(10 * time.Millisecond)
		}
		return
	}
	p.count("acquired")
	p.count("acquired permit (Do)")
	if !held {
		p.count("do: lost before the callback")
		if !errors.Is(err, core.ErrLost) {
			p.t.Errorf("key %s: Do's permit was lost before its callback ran and Do returned %v, want ErrLost", key, err)
		}
		return
	}
	b.how = "released"
	if at, ok := slot.get(); ok && at.Before(end) {
		end, b.how = at, "lost"
		p.count("lost")
		if !errors.Is(err, core.ErrLost) {
			p.t.Errorf("key %s: Do's permit fence %d was lost and Do returned %v, want ErrLost", key, b.fence, err)
		}
	}
	b.call, b.from, b.to = p.since(call), p.since(from), max(p.since(end), p.since(from))
	p.record(b)
}

// holdersLua lists a key's live holds: the value of a string key (the
// writer or a mutex's lease) as "w:<value>" and the members of a sorted
// set scored by expiry (permits, readers) that have not expired as
// "r:<token>", by the server's clock.
var holdersLua = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
if ARGV[1] == '1' then
  local v = redis.call('GET', KEYS[1])
  if v then table.insert(out, 'w:' .. v) end
end
if ARGV[2] == '1' then
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')) do
    table.insert(out, 'r:' .. m)
  end
end
return out
`)

// sampleHolders reads every key's holds every few milliseconds.
func (p *primRun) sampleHolders(ctx context.Context) {
	if p.topo.probe == nil {
		return
	}
	for ctx.Err() == nil {
		sent := time.Now()
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		hs, err := p.readHolders(c)
		cancel()
		got := time.Now()
		if err == nil {
			p.mu.Lock()
			p.hsamples = append(p.hsamples, holdersSample{sent: p.since(sent), got: p.since(got), holders: hs})
			p.mu.Unlock()
		}
		time.Sleep(3 * time.Millisecond)
	}
}

func (p *primRun) readHolders(ctx context.Context) ([][]holder, error) {
	cmds := make([]*redis.Cmd, len(p.keys))
	_, err := p.topo.probe.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range p.keys {
			base := p.storageName(k)
			keys, args := []string{base, base}, []any{"0", "1"} // a semaphore's permits
			if p.prim == primRWMutex {
				keys, args = []string{base, base + ":r"}, []any{"1", "1"}
			}
			cmds[i] = holdersLua.Eval(ctx, pipe, keys, args...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([][]holder, len(p.keys))
	for i, c := range cmds {
		vs, err := c.StringSlice()
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			kind := holdPermit
			switch {
			case p.prim == primRWMutex && strings.HasPrefix(v, "w:"):
				kind = holdWrite
			case p.prim == primRWMutex:
				kind = holdRead
			}
			tok, _, _ := strings.Cut(v[2:], "|")
			out[i] = append(out[i], holder{token: tok, kind: kind})
		}
	}
	return out, nil
}

// observe watches every key from a Client of its own, which no fault
// touches, until the returned func is called.
func (p *primRun) observe() (stop func()) {
	c, _ := p.topo.open(p.t, p.prefix, p.beliefRun)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, key := range p.keys {
		wg.Go(func() {
			for info := range c.Observe(ctx, key) {
				at := p.since(time.Now())
				p.mu.Lock()
				p.reports = append(p.reports, observed{key: key, at: at, info: info})
				p.mu.Unlock()
			}
		})
	}
	return func() {
		time.Sleep(300 * time.Millisecond) // the last resignations are seen
		cancel()
		wg.Wait()
		c.Close()
	}
}

// judgeStart reports the run and fails it if it did too little to judge.
// Called with p.mu held.
func (p *primRun) judgeStart(faults int, what string) {
	var counts []string
	for k, n := range p.counts {
		counts = append(counts, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(counts)
	p.t.Logf("%s: %d beliefs, %d samples, %d faults: %s", what, len(p.holds), len(p.hsamples), faults, strings.Join(counts, ", "))
	if p.counts["acquired"] < 20 || faults < 5 {
		p.t.Fatalf("the run did too little to judge: %d acquisitions, %d faults", p.counts["acquired"], faults)
	}
}

func (p *primRun) byKey() map[string][]primBelief {
	m := map[string][]primBelief{}
	for _, b := range p.holds {
		m[b.key] = append(m[b.key], b)
	}
	return m
}

// failf reports a violation, the first few in full.
func failf(t *testing.T, n *int, format string, args ...any) {
	t.Helper()
	*n++
	if *n <= 5 {
		t.Errorf(format, args...)
	}
}

func (p *primRun) judgeSemaphore(faults int) {
	t := p.t
	p.mu.Lock()
	defer p.mu.Unlock()
	p.judgeStart(faults, fmt.Sprintf("semaphore (limit %d, some callers %d)", semLimit, semLowLimit))
	byKey := p.byKey()

	// Referee 1: how many believe at once, and what each grant found.
	most, over, granted := 0, 0, 0
	for key, bs := range byKey {
		for _, b := range bs {
			at := map[string]bool{}     // believing at b.from
			before := map[string]bool{} // granted before b (lower fence) and believing at b.from
			for _, a := range bs {
				if a.to-a.allowance() <= b.from {
					continue
				}
				if a.from <= b.from {
					at[a.id()] = true
				}
				if a.id() != b.id() && a.fence < b.fence {
					before[a.id()] = true
				}
			}
			most = max(most, len(at))
			if len(at) > semLimit {
				failf(t, &over, "key %s: %d holders believed in permits at %v (limit %d): %s",
					key, len(at), b.from, semLimit, describeAt(bs, b.from))
			}
			if !b.reentry && len(before) >= b.limit {
				failf(t, &granted, "key %s: permit fence %d was granted under limit %d at %v while %d earlier permits were believed: %s",
					key, b.fence, b.limit, b.from, len(before), describeAt(bs, b.from))
			}
		}
	}
	t.Logf("overlap referee: at most %d permits believed at once (limit %d); %d instants over the limit, %d grants over their limit",
		most, semLimit, over, granted)

	// Referee 2: the truth in Redis.
	wrong, crowded := 0, 0
	for _, s := range p.hsamples {
		for ki, key := range p.keys {
			listed := map[string]bool{}
			for _, h := range s.holders[ki] {
				listed[h.token] = true
			}
			if len(listed) > semLimit {
				failf(t, &crowded, "key %s: Redis listed %d live permits between %v and %v (limit %d)", key, len(listed), s.sent, s.got, semLimit)
			}
			for _, b := range byKey[key] {
				if b.token != "" && b.from <= s.sent && b.to-b.allowance() >= s.got && !listed[b.token] {
					failf(t, &wrong, "key %s: Redis did not list permit fence %d (%s, believed %v–%v) between %v and %v",
						key, b.fence, b.how, b.from, b.to, s.sent, s.got)
				}
			}
		}
	}
	t.Logf("truth referee: %d samples, %d beliefs contradicted by Redis, %d samples over the limit", len(p.hsamples), wrong, crowded)

	// Referee 3: fences.
	bad := p.judgeFences(byKey, func(a, b primBelief) bool { return true }, func(a, b primBelief) bool { return true })
	t.Logf("fence referee: %d permits out of order", bad)
}

// describeAt lists the beliefs of bs that cover instant x.
func describeAt(bs []primBelief, x time.Duration) string {
	var out []string
	for _, a := range bs {
		if a.from <= x && a.to-a.allowance() > x {
			out = append(out, fmt.Sprintf("%s fence %d %v–%v (%s)", a.kind, a.fence, a.from, a.to, a.how))
		}
	}
	return strings.Join(out, "; ")
}

// judgeFences checks that distinct holders have distinct fences where
// unique(a, b) (both raised the fence), and that of two holds taken one
// after the other (a returned before b was asked for) b's fence is higher
// where strict(a, b) (b raised it), and not lower otherwise. It returns
// the violations. Called with p.mu held.
func (p *primRun) judgeFences(byKey map[string][]primBelief, unique, strict func(a, b primBelief) bool) int {
	t := p.t
	bad := 0
	for key, bs := range byKey {
		for _, a := range bs {
			for _, b := range bs {
				if a.id() == b.id() {
					continue
				}
				if a.fence == b.fence && unique(a, b) {
					if a.from < b.from || a.from == b.from && a.id() < b.id() {
						failf(t, &bad, "key %s: %s and %s holds share fence %d", key, a.kind, b.kind, a.fence)
					}
					continue
				}
				// (A re-entry carries the fence of the hold it re-entered.)
				if !b.reentry && a.from < b.call && (b.fence < a.fence || strict(a, b) && b.fence == a.fence) {
					failf(t, &bad, "key %s: %s hold fence %d (returned at %v) came before %s hold fence %d (asked for at %v)",
						key, a.kind, a.fence, a.from, b.kind, b.fence, b.call)
				}
			}
		}
	}
	return bad
}

func (p *primRun) judgeRWMutex(faults int) {
	t := p.t
	p.mu.Lock()
	defer p.mu.Unlock()
	p.judgeStart(faults, "read-write lock")
	byKey := p.byKey()

	// Referee 1: a write belief overlaps no other.
	worst := time.Duration(-1 << 62)
	violations, readers := 0, 0
	for key, bs := range byKey {
		for i, a := range bs {
			if a.kind == holdRead {
				n := map[string]bool{}
				for _, b := range bs {
					if b.kind == holdRead && b.from <= a.from && b.to > a.from {
						n[b.id()] = true
					}
				}
				readers = max(readers, len(n))
				continue
			}
			for j, b := range bs {
				if i == j || a.id() == b.id() || b.kind == holdWrite && b.fence <= a.fence {
					continue // each pair of writes once, from the earlier
				}
				// The order on the server: writes by fence; a read carries
				// the fence of the last write before it.
				first, second := a, b
				if b.kind == holdRead && b.fence < a.fence {
					first, second = b, a
				}
				over := first.to - second.from
				worst = max(worst, over)
				if over > first.allowance() {
					failf(t, &violations, "key %s: %s hold fence %d (%s, ttl %v) believed %v after %s hold fence %d had the lock",
						key, first.kind, first.fence, first.how, first.ttl, over, second.kind, second.fence)
				}
			}
		}
	}
	t.Logf("exclusion referee: worst gap %v (negative: the earlier belief ended first), %d violations; up to %d readers at once",
		worst, violations, readers)

	// Referee 2: the truth in Redis.
	wrong, both := 0, 0
	for _, s := range p.hsamples {
		for ki, key := range p.keys {
			listed := map[string]string{}
			writers, rs := 0, 0
			for _, h := range s.holders[ki] {
				listed[h.token] = h.kind
				if h.kind == holdWrite {
					writers++
				} else {
					rs++
				}
			}
			if writers > 0 && rs > 0 {
				failf(t, &both, "key %s: Redis showed a writer and %d live readers between %v and %v", key, rs, s.sent, s.got)
			}
			for _, b := range byKey[key] {
				if b.from <= s.sent && b.to-b.allowance() >= s.got && listed[b.token] != b.kind {
					failf(t, &wrong, "key %s: Redis did not list the %s hold fence %d (%s, believed %v–%v) between %v and %v: %v",
						key, b.kind, b.fence, b.how, b.from, b.to, s.sent, s.got, s.holders[ki])
				}
			}
		}
	}
	t.Logf("truth referee: %d samples, %d beliefs contradicted by Redis, %d samples with a writer among readers", len(p.hsamples), wrong, both)

	// Referee 3: fences. Writes raise the fence; reads carry the last one.
	bad := p.judgeFences(byKey,
		func(a, b primBelief) bool { return a.kind == holdWrite && b.kind == holdWrite },
		func(_, b primBelief) bool { return b.kind == holdWrite })
	t.Logf("fence referee: %d holds out of order", bad)
}

// observeGrantsShown: Observe reported a fair grant that its waiter had
// not claimed yet as a leader with an empty announcement
// (TestReviewObserveReportsUnclaimedGrant). It no longer does: a report
// with an empty announcement fails the observe referee.
const observeGrantsShown = false

// observeStale bounds the time from Observe's read of the state to the
// report's arrival: Inspect on a healthy Client (on Redlock, one that
// waits up to a second for a paused node) and the hand-over.
func (p *primRun) observeStale() time.Duration {
	if p.redlock {
		return 1500 * time.Millisecond
	}
	return 500 * time.Millisecond
}

// redlockGhostLife bounds how long after an earlier leader's belief ended
// Observe may report it again on Redlock, after a later leader: a write of
// its (an acquisition's on a node that did not answer in time, or a heal)
// that the injector held "on the wire" lands up to a stall later, on a node
// the later leader has left, and makes a majority name the earlier leader
// again until the write's TTL runs out. No lease is believed twice (the
// overlap referee says so); Observe's doc tells users of this.
func redlockGhostLife(ttl time.Duration) time.Duration {
	return beliefStallMax + ttl + 250*time.Millisecond
}

func (p *primRun) judgeLeader(faults int) {
	t := p.t
	p.judge(faults) // overlap, truth, porcupine: at most one believed leader
	p.mu.Lock()
	defer p.mu.Unlock()

	byToken := map[string]primBelief{}
	for _, b := range p.holds {
		byToken[b.token] = b
	}
	stale := p.observeStale()
	unknown, ambiguous, order, fences, wrong, early, grants, announced, ghosts := 0, 0, 0, 0, 0, 0, 0, 0, 0
	last := map[string]primBelief{}
	seen := map[string]bool{}
	for _, o := range p.reports {
		info := o.info
		if info.Held {
			seen[info.Token] = true
			b, ok := byToken[info.Token]
			if info.Metadata == "" && observeGrantsShown {
				grants++ // see observeGrantsShown
				if !ok {
					continue
				}
			}
			switch {
			case !ok:
				if _, campaigned := p.campaigns[info.Metadata]; campaigned {
					ambiguous++ // a Campaign that failed after its script ran
				} else {
					failf(t, &unknown, "key %s: Observe reported a leader that never campaigned: %+v", o.key, info)
				}
			default:
				if b.call > o.at {
					failf(t, &early, "key %s: Observe reported leader fence %d at %v, before it campaigned (%v)", o.key, b.fence, o.at, b.call)
				}
				if info.Metadata != b.value && (info.Metadata != "" || !observeGrantsShown) {
					failf(t, &announced, "key %s: Observe reported leader fence %d with announcement %q, want %q", o.key, b.fence, info.Metadata, b.value)
				}
				if !p.redlock && info.Fence != b.fence {
					failf(t, &fences, "key %s: Observe reported leader fence %d with fence %d", o.key, b.fence, info.Fence)
				}
				if prev, ok := last[o.key]; ok && prev.token != b.token && prev.fence > b.fence {
					if p.redlock && o.at <= b.to+redlockGhostLife(b.ttl) {
						ghosts++ // see redlockGhostLife
					} else {
						failf(t, &order, "key %s: Observe reported leader fence %d at %v after leader fence %d", o.key, b.fence, o.at, prev.fence)
					}
				}
				last[o.key] = b
				if b.released > 0 && o.at > b.released+stale {
					failf(t, &wrong, "key %s: Observe reported leader fence %d at %v, %v after its resignation returned",
						o.key, b.fence, o.at, o.at-b.released)
				}
			}
		}
		// A leader that believed across the report's whole window is the
		// one reported.
		for _, b := range p.holds {
			if b.key == o.key && b.from <= o.at-stale && b.to-b.allowance() >= o.at && (!info.Held || info.Token != b.token) {
				failf(t, &wrong, "key %s: Observe reported %s at %v while leader fence %d led throughout (%v–%v)",
					o.key, describeInfo(info), o.at, b.fence, b.from, b.to)
			}
		}
	}
	missed, long := 0, 0
	cover := 2*time.Second + 500*time.Millisecond // observePoll and a margin
	if p.redlock {
		cover += time.Second // a paused node holds Inspect up to a second
	}
	for _, b := range p.holds {
		if b.to-b.from > cover {
			long++
			if !seen[b.token] {
				failf(t, &missed, "key %s: Observe never reported leader fence %d, which led %v (%v–%v, %s)",
					b.key, b.fence, b.to-b.from, b.from, b.to, b.how)
			}
		}
	}
	total := 0
	for _, b := range p.holds {
		if seen[b.token] {
			total++
		}
	}
	t.Logf("observe referee: %d reports, %d of %d leaders seen (%d of %d that led over %v), %d reports of failed campaigns, "+
		"%d of unclaimed grants, %d Redlock ghosts; %d unknown, %d early, %d out of order, %d wrong fences, %d wrong announcements, %d stale or wrong, %d missed",
		len(p.reports), total, len(p.holds), long-missed, long, cover, ambiguous, grants, ghosts,
		unknown, early, order, fences, announced, wrong, missed)
}

func describeInfo(info core.Info) string {
	if !info.Held {
		return "no leader"
	}
	return fmt.Sprintf("leader %s (fence %d)", info.Metadata, info.Fence)
}
