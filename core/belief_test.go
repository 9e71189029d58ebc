package core_test

// The belief checker: randomized, seeded runs in which workers lock, hold,
// extend and release keys through several Clients while a fault injector
// stalls, delays and drops the commands of single keys on single Clients
// (or holds back their answers after they ran), closes Clients with
// renewals in flight and pauses Redlock nodes. Every holder's belief
// interval is recorded: [Lock returned, min(Release called,
// Lost closed)], the loss time taken from the Observer, which runs just
// before Lost closes. Three referees judge the history:
//
//   - overlap: two beliefs on one key never overlap by more than the
//     allowance (below);
//   - truth: a sampler reads the leases from Redis all along; no holder
//     believed across a whole sample that showed another token;
//   - porcupine (github.com/anishathalye/porcupine), a linearizability
//     checker written elsewhere: the history of acquisitions and belief
//     ends must be linearizable against a mutex whose fences strictly rise.
//
// The allowance is the lease's drift margin plus beliefSlack: the margin is
// the documented guarantee (the holder is told at least the margin before
// the server's expiry), and beliefSlack covers this test process's own
// scheduling under -race on a loaded two-core machine (the deadline timer
// fires late when the process is not running — the same as a process
// pause, which is what fences are for).
//
// A run is reproducible in its choices: LATCHKEY_SEED=<n> replays the
// same operations and faults (goroutine interleavings still vary), and the
// seed is printed. LATCHKEY_BELIEF_DURATION sets the length of each
// topology's run (default 10 s: make ci; make soak runs minutes).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/redistest"
	"github.com/redis/go-redis/v9"
)

const beliefSlack = 25 * time.Millisecond

// beliefStallMax is the longest the injector holds one command (a stall).
const beliefStallMax = 1250 * time.Millisecond

// margin mirrors the default drift margin (WithDriftMargin's doc).
func margin(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/10)
}

// A beliefTopology is a deployment the checker runs on.
type beliefTopology struct {
	// open returns a new Client and the fault hooks on its Redis clients
	// (one per node); it closes the Redis clients in t.Cleanup.
	open func(t *testing.T, prefix string, obs core.Observer) (*core.Client, []*keyFault)
	// truth reads the lease values of names (nil: no sampler).
	truth func(ctx context.Context, names []string) ([]string, error)
	// pause, if set, stalls one server for d.
	pause func(t *testing.T, rng *rand.Rand, d time.Duration)
	// probe reads the deployment directly (nil: Redlock, several servers).
	probe redis.UniversalClient
	// clean removes a run's keys (nil: a private deployment).
	clean func(t *testing.T, prefix string)
}

func beliefSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LATCHKEY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LATCHKEY_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with LATCHKEY_SEED=%d)", seed, seed)
	return seed
}

func beliefDuration(t *testing.T) time.Duration {
	if s := os.Getenv("LATCHKEY_BELIEF_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("LATCHKEY_BELIEF_DURATION=%q: %v", s, err)
		}
		return d
	}
	return 10 * time.Second
}

// userOptions are go-redis settings as the README advises; half the
// Clients leave ContextTimeoutEnabled off, so that the watchdog's own
// give-up path is exercised too.
func userOptions(addr string, ctxTimeouts bool) *redis.Options {
	return &redis.Options{
		Addr: addr, ContextTimeoutEnabled: ctxTimeouts,
		DialTimeout: 300 * time.Millisecond, MaxRetries: 1, PoolSize: 32,
	}
}

func TestBeliefStandalone(t *testing.T) {
	faultTest(t)
	runBelief(t, standaloneBelief(t))
}

func TestBeliefCluster(t *testing.T) {
	faultTest(t)
	runBelief(t, clusterBelief(t))
}

func TestBeliefRedlock(t *testing.T) {
	faultTest(t)
	runBelief(t, redlockBelief(t))
}

// standaloneBelief is the shared Redis server, each run under a prefix of
// its own that it removes.
func standaloneBelief(t *testing.T) beliefTopology {
	addr := redistest.Addr(t)
	probe := redistest.Client(t)
	n := 0
	return beliefTopology{
		open: func(t *testing.T, prefix string, obs core.Observer) (*core.Client, []*keyFault) {
			n++
			rdb := redis.NewClient(userOptions(addr, n%2 == 0))
			t.Cleanup(func() { rdb.Close() })
			return mustNew(core.NewRedis(rdb, core.WithKeyPrefix(prefix), core.WithObserver(obs))), []*keyFault{newKeyFault(t, rdb)}
		},
		truth: func(ctx context.Context, names []string) ([]string, error) {
			return mget(ctx, probe, names)
		},
		probe: probe,
		clean: func(t *testing.T, prefix string) { cleanPrefix(t, probe, prefix) },
	}
}

// clusterBelief is a private three-master Cluster.
func clusterBelief(t *testing.T) beliefTopology {
	cluster := redistest.StartCluster(t, 3)
	probe := cluster.Client(t)
	n := 0
	return beliefTopology{
		open: func(t *testing.T, prefix string, obs core.Observer) (*core.Client, []*keyFault) {
			n++
			cc := redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: cluster.Addrs(), ContextTimeoutEnabled: n%2 == 0,
				DialTimeout: 300 * time.Millisecond, MaxRetries: 1, PoolSize: 32,
			})
			t.Cleanup(func() { cc.Close() })
			return mustNew(core.NewRedis(cc, core.WithKeyPrefix(prefix), core.WithObserver(obs))), []*keyFault{newKeyFault(t, cc)}
		},
		truth: func(ctx context.Context, names []string) ([]string, error) {
			return mget(ctx, probe, names)
		},
		probe: probe,
	}
}

// redlockBelief is three private servers under Redlock, one of which the
// injector may pause at a time.
func redlockBelief(t *testing.T) beliefTopology {
	var srvs []*redistest.Server
	for range 3 {
		srvs = append(srvs, redistest.StartServer(t))
	}
	n := 0
	var pauseMu sync.Mutex
	return beliefTopology{
		open: func(t *testing.T, prefix string, obs core.Observer) (*core.Client, []*keyFault) {
			n++
			var nodes []redis.UniversalClient
			var hooks []*keyFault
			for _, s := range srvs {
				rdb := redis.NewClient(userOptions(s.Addr(), n%2 == 0))
				t.Cleanup(func() { rdb.Close() })
				nodes = append(nodes, rdb)
				hooks = append(hooks, newKeyFault(t, rdb))
			}
			return mustNew(core.NewRedlock(nodes, core.WithKeyPrefix(prefix), core.WithObserver(obs))), hooks
		},
		pause: func(t *testing.T, rng *rand.Rand, d time.Duration) {
			pauseMu.Lock() // one node at a time: a majority stays up
			defer pauseMu.Unlock()
			s := srvs[rng.IntN(len(srvs))]
			s.Pause(t)
			time.Sleep(d)
			s.Resume(t)
		},
	}
}

// mget reads the values of names one GET each (they may live in different
// Cluster slots), pipelined.
func mget(ctx context.Context, rdb redis.UniversalClient, names []string) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(names))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.Get(ctx, n)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]string, len(names))
	for i, c := range cmds {
		v, err := c.Result()
		if err == nil {
			out[i], _, _ = strings.Cut(v, "|")
		}
	}
	return out, nil
}

// A belief is one holder's: from Lock's return to Release's call or the
// loss, whichever came first.
type belief struct {
	key            string
	fence          int64
	token          string
	ttl            time.Duration
	call, from, to time.Duration // since the run's start: Lock called, returned; belief ended
	how            string        // "released" or "lost"
}

// A sample is the truth read from Redis between sent and got.
type sample struct {
	sent, got time.Duration
	tokens    []string // by key index; "" when free
}

type beliefRun struct {
	t      *testing.T
	topo   beliefTopology
	prefix string
	keys   []string
	start  time.Time

	mu      sync.Mutex
	lost    map[string]time.Time // "key/fence" -> when Lost closed
	beliefs []belief
	samples []sample
	counts  map[string]int

	poolMu  sync.Mutex
	clients []*core.Client
	hooks   [][]*keyFault

	// storage names the Redis key of a lock key that the injector stalls
	// (nil: the mutex's lease).
	storage func(key string) string
}

func (r *beliefRun) faultKey(key string) string {
	if r.storage != nil {
		return r.storage(key)
	}
	return r.prefix + ":{" + key + "}"
}

func (r *beliefRun) since(at time.Time) time.Duration { return at.Sub(r.start) }

func (r *beliefRun) count(what string) {
	r.mu.Lock()
	r.counts[what]++
	r.mu.Unlock()
}

// The run is its clients' Observer: it records loss times.
func (r *beliefRun) OpStart(ctx context.Context, _ core.Op, _ string, _ core.Kind) (context.Context, func(core.OpResult)) {
	return ctx, func(core.OpResult) {}
}

func (r *beliefRun) LeaseLost(ctx context.Context, key string, _ core.Kind, fence int64, _ time.Duration, _ error) {
	at := time.Now()
	if s, ok := ctx.Value(lossSlotKey{}).(*lossSlot); ok {
		s.set(at)
	}
	r.mu.Lock()
	r.lost[key+"/"+strconv.FormatInt(fence, 10)] = at
	r.mu.Unlock()
}

func (r *beliefRun) lostAt(key string, fence int64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.lost[key+"/"+strconv.FormatInt(fence, 10)]
	return at, ok
}

// A lossSlot receives the loss time of the one lease whose acquisition
// context carried it (withLossSlot): read holds share their fence, so a
// key and fence do not name one.
type lossSlot struct {
	mu sync.Mutex
	at time.Time
}

type lossSlotKey struct{}

func withLossSlot(ctx context.Context) (context.Context, *lossSlot) {
	s := &lossSlot{}
	return context.WithValue(ctx, lossSlotKey{}, s), s
}

func (s *lossSlot) set(at time.Time) {
	s.mu.Lock()
	if s.at.IsZero() {
		s.at = at
	}
	s.mu.Unlock()
}

func (s *lossSlot) get() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at, !s.at.IsZero()
}

func (r *beliefRun) client(rng *rand.Rand) *core.Client {
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	return r.clients[rng.IntN(len(r.clients))]
}

const beliefClients = 3

func runBelief(t *testing.T, topo beliefTopology) {
	seed := beliefSeed(t)
	r := newBeliefRun(t, topo, 4)
	faults := r.run(seed, beliefDuration(t), r.worker, r.sample)
	r.judge(faults)
}

// newBeliefRun opens the run's Clients (it is their Observer) on keys
// k0…k<keys-1> under a fresh prefix, removed when the test ends.
func newBeliefRun(t *testing.T, topo beliefTopology, keys int) *beliefRun {
	r := &beliefRun{
		t: t, topo: topo, prefix: testPrefix(), start: time.Now(),
		lost: map[string]time.Time{}, counts: map[string]int{},
	}
	if topo.clean != nil {
		t.Cleanup(func() { topo.clean(t, r.prefix) })
	}
	for i := range keys {
		r.keys = append(r.keys, fmt.Sprintf("k%d", i))
	}
	for range beliefClients {
		c, h := topo.open(t, r.prefix, r)
		r.clients = append(r.clients, c)
		r.hooks = append(r.hooks, h)
	}
	return r
}

// run runs 8 workers (work, each with its own stream of the seed), the
// fault injector and the sampler for d; then it lifts every fault, closes
// the Clients and returns how many faults it made.
func (r *beliefRun) run(seed uint64, d time.Duration, work func(context.Context, *rand.Rand), sample func(context.Context)) int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx, rand.New(rand.NewPCG(seed, uint64(w+1))))
		}()
	}
	injected := make(chan int, 1)
	go func() { injected <- r.inject(ctx, rand.New(rand.NewPCG(seed, 0))) }()
	sampled := make(chan struct{})
	go func() { defer close(sampled); sample(ctx) }()
	wg.Wait()
	faults := <-injected
	<-sampled
	for _, h := range r.hooks {
		for _, kf := range h {
			kf.clear()
		}
	}
	for _, c := range r.clients {
		c.Close()
	}
	return faults
}

// worker locks a random key through a random Client, holds it for a random
// time (often across renewals), sometimes extends it, and releases it.
func (r *beliefRun) worker(ctx context.Context, rng *rand.Rand) {
	ttls := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	for ctx.Err() == nil {
		c := r.client(rng)
		key := r.keys[rng.IntN(len(r.keys))]
		ttl := ttls[rng.IntN(len(ttls))]
		call := time.Now()
		l, err := c.Lock(ctx, key, core.WithTTL(ttl), core.WithWaitTimeout(time.Second))
		from := time.Now()
		if err != nil {
			r.count("lock error: " + beliefCause(err))
			if !errors.Is(err, core.ErrNotAcquired) && !errors.Is(err, core.ErrClosed) {
				time.Sleep(10 * time.Millisecond) // an outage: do not spin
			}
			continue
		}
		r.count("acquired")
		var hold time.Duration
		extend := false
		switch p := rng.IntN(10); {
		case p < 5:
			hold = rand.N(ttl / 2)
		case p < 8:
			hold = ttl + rand.N(2*ttl) // across renewals
		default:
			hold, extend = rand.N(ttl/2), true
		}
		r.hold(l, hold)
		if extend && l.Err() == nil {
			if err := l.Extend(context.Background(), ttls[rng.IntN(len(ttls))]); err != nil {
				r.count("extend error: " + beliefCause(err))
			}
			r.hold(l, rand.N(ttl))
		}
		end := time.Now()
		if err := l.Release(context.Background()); err != nil {
			r.count("release error: " + beliefCause(err))
		}
		b := belief{key: key, fence: l.Fence(), token: l.Token(), ttl: ttl, how: "released"}
		if at, ok := r.lostAt(key, l.Fence()); ok && at.Before(end) {
			end, b.how = at, "lost"
			r.count("lost")
		}
		b.call, b.from, b.to = r.since(call), r.since(from), max(r.since(end), r.since(from))
		r.mu.Lock()
		r.beliefs = append(r.beliefs, b)
		r.mu.Unlock()
	}
}

func (r *beliefRun) hold(l *core.Lock, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.Lost():
	}
}

// beliefCause names an error for the counts.
func beliefCause(err error) string {
	for _, e := range []error{core.ErrNotAcquired, core.ErrNotHeld, core.ErrClosed, core.ErrLost, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return strings.TrimPrefix(e.Error(), "core: ")
		}
	}
	var qe *core.QuorumError
	if errors.As(err, &qe) {
		return "quorum"
	}
	return "backend"
}

// inject makes a fault every 50–300 ms until ctx ends; it returns how many.
func (r *beliefRun) inject(ctx context.Context, rng *rand.Rand) int {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(50*time.Millisecond + rand.N(250*time.Millisecond)):
		}
		i := rng.IntN(beliefClients)
		r.poolMu.Lock()
		hooks := r.hooks[i]
		r.poolMu.Unlock()
		n++
		switch p := rng.IntN(20); {
		case p < 12: // stall one key's commands on one Client (one node of it)
			kf := hooks[rng.IntN(len(hooks))]
			key := r.keys[rng.IntN(len(r.keys))]
			// Held before the send (given up with the context, or sent
			// anyway as if on the wire), or answered late after it ran.
			how := rng.IntN(3)
			kf.add(&faultRule{
				key:    r.faultKey(key),
				delay:  50*time.Millisecond + time.Duration(rng.IntN(int(beliefStallMax/time.Millisecond)-50))*time.Millisecond,
				onWire: how == 1,
				late:   how == 2,
				times:  1 + rng.IntN(4),
			})
			r.count("fault: stall")
		case p < 16:
			for _, kf := range hooks {
				kf.clear()
			}
			r.count("fault: clear")
		case p < 18: // Close a Client with whatever is in flight, and replace it
			c, h := r.topo.open(r.t, r.prefix, r)
			r.poolMu.Lock()
			old := r.clients[i]
			r.clients[i], r.hooks[i] = c, h
			r.poolMu.Unlock()
			old.Close()
			r.count("fault: close")
		default:
			if r.topo.pause != nil {
				r.topo.pause(r.t, rng, 100*time.Millisecond+time.Duration(rng.IntN(600))*time.Millisecond)
				r.count("fault: pause node")
			}
		}
	}
}

// sample reads the truth every few milliseconds.
func (r *beliefRun) sample(ctx context.Context) {
	if r.topo.truth == nil {
		return
	}
	names := make([]string, len(r.keys))
	for i, k := range r.keys {
		names[i] = r.prefix + ":{" + k + "}"
	}
	for ctx.Err() == nil {
		sent := time.Now()
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		tokens, err := r.topo.truth(c, names)
		cancel()
		got := time.Now()
		if err == nil {
			r.mu.Lock()
			r.samples = append(r.samples, sample{sent: r.since(sent), got: r.since(got), tokens: tokens})
			r.mu.Unlock()
		}
		time.Sleep(3 * time.Millisecond)
	}
}

// judge runs the three referees and reports the run.
func (r *beliefRun) judge(faults int) {
	t := r.t
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for k, n := range r.counts {
		keys = append(keys, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(keys)
	t.Logf("%d beliefs, %d samples, %d faults: %s", len(r.beliefs), len(r.samples), faults, strings.Join(keys, ", "))
	if r.counts["acquired"] < 20 || faults < 5 {
		t.Fatalf("the run did too little to judge: %d acquisitions, %d faults", r.counts["acquired"], faults)
	}

	// Referee 1: overlaps.
	byKey := map[string][]belief{}
	for _, b := range r.beliefs {
		byKey[b.key] = append(byKey[b.key], b)
	}
	worst := time.Duration(-1 << 62)
	violations := 0
	for key, bs := range byKey {
		for i := range bs {
			for j := range bs {
				a, b := bs[i], bs[j]
				if i == j || a.fence >= b.fence {
					continue
				}
				// a came first (lower fence): its belief must end before b's starts.
				over := a.to - b.from
				worst = max(worst, over)
				if over > margin(a.ttl)+beliefSlack {
					violations++
					if violations <= 5 {
						t.Errorf("key %s: holder fence %d (%s, ttl %v) believed %v after holder fence %d had the key",
							key, a.fence, a.how, a.ttl, over, b.fence)
					}
				}
			}
		}
	}
	t.Logf("overlap referee: worst gap %v (negative: the earlier belief ended first), %d violations", worst, violations)

	// Referee 2: the truth in Redis.
	tokenBelief := map[string][]belief{}
	for _, b := range r.beliefs {
		tokenBelief[b.key] = append(tokenBelief[b.key], b)
	}
	wrong := 0
	for _, s := range r.samples {
		for ki, key := range r.keys {
			tok := s.tokens[ki]
			if tok == "" {
				continue
			}
			for _, b := range tokenBelief[key] {
				if b.token != tok && b.from <= s.sent && b.to-margin(b.ttl)-beliefSlack >= s.got {
					wrong++
					if wrong <= 5 {
						t.Errorf("key %s: Redis showed another holder between %v and %v while fence %d (%s) believed it held the key until %v",
							key, s.sent, s.got, b.fence, b.how, b.to)
					}
				}
			}
		}
	}
	t.Logf("truth referee: %d samples, %d beliefs contradicted by Redis", len(r.samples), wrong)

	// Referee 3: porcupine.
	res := porcupine.CheckOperationsTimeout(mutexModel(), r.history(), 60*time.Second)
	t.Logf("porcupine: %s", res)
	if res == porcupine.Illegal {
		t.Errorf("porcupine: the history of acquisitions and belief ends is not linearizable against a fenced mutex")
	}
}

// lockOp is an operation of the mutex model.
type lockOp struct {
	key     string
	acquire bool // else: the belief ended
	fence   int64
}

type mutexState struct{ holder, last int64 }

// mutexModel is a mutex whose acquisitions carry strictly rising fences:
// an acquisition needs the mutex free and a fence above every earlier one;
// an end needs the mutex held by that fence.
func mutexModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range h {
				k := op.Input.(lockOp).key
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			var out [][]porcupine.Operation
			for _, k := range order {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() any { return mutexState{} },
		Step: func(s, in, _ any) (bool, any) {
			st, op := s.(mutexState), in.(lockOp)
			if op.acquire {
				if st.holder != 0 || op.fence <= st.last {
					return false, st
				}
				return true, mutexState{holder: op.fence, last: op.fence}
			}
			if st.holder != op.fence {
				return false, st
			}
			return true, mutexState{last: st.last}
		},
		DescribeOperation: func(in, _ any) string {
			op := in.(lockOp)
			if op.acquire {
				return fmt.Sprintf("acquire %s fence %d", op.key, op.fence)
			}
			return fmt.Sprintf("end %s fence %d", op.key, op.fence)
		},
	}
}

// history turns the beliefs into porcupine operations: an acquisition
// spans [Lock called, Lock returned]; a belief's end is an instant, moved
// earlier by the allowance. Called with r.mu held.
func (r *beliefRun) history() []porcupine.Operation {
	var ops []porcupine.Operation
	for _, b := range r.beliefs {
		end := max(b.to-margin(b.ttl)-beliefSlack, b.from)
		ops = append(ops,
			porcupine.Operation{Input: lockOp{key: b.key, acquire: true, fence: b.fence}, Call: int64(b.call), Return: int64(b.from)},
			porcupine.Operation{Input: lockOp{key: b.key, fence: b.fence}, Call: int64(end), Return: int64(end)},
		)
	}
	return ops
}
