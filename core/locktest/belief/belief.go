package belief

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/core"
)

// Environment variables a run reads.
const (
	SeedEnv     = "LATCHKEY_SEED"            // the seed to replay (a decimal uint64)
	DurationEnv = "LATCHKEY_BELIEF_DURATION" // a run's length (a time.Duration)
)

// Slack is Config.Slack's default: room for the test process's own
// scheduling (a deadline timer that fires late on a loaded machine under
// -race is a process pause, which fences are for, not a broken promise).
const Slack = 25 * time.Millisecond

// Config describes a run. Only Open is required.
type Config struct {
	// Open returns Client i of the run (0 ≤ i < Clients), on a connection
	// to the store of its own, so that a Fault can hit it alone, and with
	// obs installed (core.WithObserver(obs)). The run closes the Clients
	// when it ends; whatever else Open made (a pool, a session, a proxy)
	// is the caller's to close.
	Open func(i int, obs core.Observer) (*core.Client, error)
	// Clients is how many Clients the run opens (default 3).
	Clients int
	// Keys are the lock keys the workers share (default belief-0 …
	// belief-3). They must be the run's own: nobody else may lock them.
	Keys []string
	// TTLs are those the workers pick from for each lock and extension
	// (default 200, 400 and 800 ms).
	TTLs []time.Duration
	// Duration is the run's length (default $LATCHKEY_BELIEF_DURATION,
	// else 8 s).
	Duration time.Duration
	// Seed makes the run's choices (zero: $LATCHKEY_SEED, else the clock).
	Seed uint64
	// Workers is how many goroutines lock and release (default 8).
	Workers int
	// WaitTimeout bounds each Lock's wait (default one second).
	WaitTimeout time.Duration
	// Faults are the faults the injector makes: each once first, in a
	// random order, then picked by Weight. None: the run checks the lock
	// without faults.
	Faults []Fault
	// FaultEvery is the mean quiet time between two faults (default
	// 300 ms); faults are made one at a time.
	FaultEvery time.Duration
	// Margin is the Clients' drift margin for a TTL (default core's:
	// min(ttl/100+2ms, ttl/10)); set it if Open passes WithDriftMargin.
	Margin func(ttl time.Duration) time.Duration
	// Slack is added to the margin in the overlap referee, and is how
	// soon after Lock's return a loss leaves a belief out of the fence
	// referee (default Slack).
	Slack time.Duration
	// MinAcquired is how many acquisitions a run must make to be judged
	// at all (default 20).
	MinAcquired int
}

// A Fault is one kind of fault the injector may make.
type Fault struct {
	// Name counts the fault in the Report ("cut", "stall", "restart").
	Name string
	// Inject makes the fault on Client i (chosen by the run) and returns
	// the function that lifts it, called after a time between Min and Max
	// (at once if the run ends first). A nil lift means the fault was
	// over when Inject returned (a restart). An error is the harness's
	// failure: it is reported, and the run fails.
	Inject func(i int) (lift func(), err error)
	// Min and Max bound how long the fault lasts before lift.
	Min, Max time.Duration
	// Weight is the fault's share of the injections (default 1).
	Weight int
}

// Run runs a checker on cfg for t: it prints the seed, runs Check, logs
// the Report and fails t if the run broke the promise or did too little
// to judge. It returns the Report.
func Run(t testing.TB, cfg Config) *Report {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatalf("belief: %v", err)
	}
	t.Logf("belief: seed %d (replay with %s=%d), %v", cfg.Seed, SeedEnv, cfg.Seed, cfg.Duration)
	rep, err := Check(context.Background(), cfg)
	if err != nil {
		t.Fatalf("belief: %v", err)
	}
	t.Logf("belief: %v", rep)
	if err := rep.Err(); err != nil {
		t.Errorf("belief: %v", err)
	}
	return rep
}

// Check runs the checker on cfg until cfg.Duration passes or ctx ends,
// and returns its Report; the error is for a Config it cannot run (bad
// input, an environment variable it cannot read, an Open that failed).
// Report.Err tells whether the run passed.
func Check(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, start: time.Now(), faults: map[string]int{}, errs: map[string]int{}}
	for i := range cfg.Clients {
		c, err := cfg.Open(i, r)
		if err == nil && c == nil {
			err = errors.New("nil Client")
		}
		if err != nil {
			for _, c := range r.clients {
				c.Close()
			}
			return nil, fmt.Errorf("open Client %d: %w", i, err)
		}
		r.clients = append(r.clients, c)
	}
	r.run(ctx)
	return r.judge(), nil
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Open == nil {
		return cfg, errors.New("Config.Open is required")
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 3
	}
	if len(cfg.Keys) == 0 {
		for i := range 4 {
			cfg.Keys = append(cfg.Keys, "belief-"+strconv.Itoa(i))
		}
	}
	if len(cfg.TTLs) == 0 {
		cfg.TTLs = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	}
	for _, ttl := range cfg.TTLs {
		if ttl <= 0 {
			return cfg, fmt.Errorf("TTL %v: want > 0", ttl)
		}
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 8 * time.Second
		if s := os.Getenv(DurationEnv); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return cfg, fmt.Errorf("%s=%q: want a positive duration", DurationEnv, s)
			}
			cfg.Duration = d
		}
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
		if s := os.Getenv(SeedEnv); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cfg, fmt.Errorf("%s=%q: %v", SeedEnv, s, err)
			}
			cfg.Seed = v
		}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = time.Second
	}
	if cfg.FaultEvery <= 0 {
		cfg.FaultEvery = 300 * time.Millisecond
	}
	cfg.Faults = slices.Clone(cfg.Faults) // the caller's stays as it was
	cfg.Keys, cfg.TTLs = slices.Clone(cfg.Keys), slices.Clone(cfg.TTLs)
	for i, f := range cfg.Faults {
		if f.Inject == nil || f.Name == "" || f.Min < 0 || f.Max < f.Min {
			return cfg, fmt.Errorf("Fault %d (%q): want a Name, an Inject and 0 ≤ Min ≤ Max", i, f.Name)
		}
		if f.Weight <= 0 {
			cfg.Faults[i].Weight = 1
		}
	}
	if cfg.Margin == nil {
		cfg.Margin = defaultMargin
	}
	if cfg.Slack <= 0 {
		cfg.Slack = Slack
	}
	if cfg.MinAcquired <= 0 {
		cfg.MinAcquired = 20
	}
	return cfg, nil
}

// defaultMargin is core's default drift margin (WithDriftMargin).
func defaultMargin(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/10)
}

// A run is one check in progress; it is its Clients' Observer.
type run struct {
	cfg     Config
	start   time.Time
	clients []*core.Client

	mu       sync.Mutex
	beliefs  []record
	attempts int // Lock calls that did not end with the run
	outages  int // of those, the ones that ended ErrUnavailable
	acquired int
	faults   map[string]int
	harm     []string       // the harness's failures: faults not made, an Observer not installed
	errs     map[string]int // by operation and cause
}

// A record is one holder's belief.
type record struct {
	client         int
	key            string
	fence          int64
	ttl            time.Duration // the longest the lease was given (lock or extend)
	call, from, to time.Duration // since the start: Lock called, returned; belief ended
	lost           bool          // ended by the loss, not by Release
}

func (r *run) since(at time.Time) time.Duration { return at.Sub(r.start) }

// run runs the workers and the injector until cfg.Duration passes or ctx
// ends; then it lifts the fault in progress and closes the Clients.
func (r *run) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range r.cfg.Workers {
		wg.Go(func() { r.worker(ctx, rand.New(rand.NewPCG(r.cfg.Seed, uint64(w+1)))) })
	}
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		r.inject(ctx, rand.New(rand.NewPCG(r.cfg.Seed, 0)))
	}()
	<-injected // it lifts its fault when ctx ends: the workers can finish
	wg.Wait()
	for _, c := range r.clients {
		c.Close()
	}
}

// inject makes one fault after another, with quiet times between, until
// ctx ends: first each kind once, in a random order, then by weight.
func (r *run) inject(ctx context.Context, rng *rand.Rand) {
	total := 0
	for _, f := range r.cfg.Faults {
		total += f.Weight
	}
	if total == 0 {
		return
	}
	first := rng.Perm(len(r.cfg.Faults))
	every := r.cfg.FaultEvery
	for {
		if !sleep(ctx, every/2+time.Duration(rng.Int64N(int64(every)))) {
			return
		}
		var f Fault
		if len(first) > 0 { // each kind once, in a random order, then by weight
			f, first = r.cfg.Faults[first[0]], first[1:]
		} else {
			n := rng.IntN(total)
			for _, f = range r.cfg.Faults {
				if n -= f.Weight; n < 0 {
					break
				}
			}
		}
		i := rng.IntN(r.cfg.Clients)
		d := f.Min
		if f.Max > f.Min {
			d += time.Duration(rng.Int64N(int64(f.Max - f.Min)))
		}
		lift, err := f.Inject(i)
		if err != nil {
			r.harness("fault %s on Client %d: %v", f.Name, i, err)
		} else {
			r.mu.Lock()
			r.faults[f.Name]++
			r.mu.Unlock()
		}
		if lift != nil {
			sleep(ctx, d)
			lift()
		}
	}
}

// harness records a failure of the harness (not of the lock); the first
// ten are kept.
func (r *run) harness(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.harm) < 10 {
		r.harm = append(r.harm, fmt.Sprintf(format, args...))
	}
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
