// Command bench compares distributed-lock drivers on a real local Redis.
//
// One run:     go run . -scenario contended -driver raw -workers 2 -think 500us
// The matrix:  go run . -matrix smoke            (or: -matrix full -rounds 5)
// Primitives:  go run . -primitives -spawn 1     (semaphore, RWMutex, LockAll, Campaign vs raw)
// Old results: go run . -report results/*.jsonl
// Backends:    go run . -backends all -rounds 3  (latchkey on Redis, PostgreSQL, MariaDB, SQLite, etcd, ZooKeeper, memcached)
//
// See README.md for what each scenario measures.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is one run's settings; zero values mean the scenario default.
type Config struct {
	Scenario    string
	Driver      string
	Addrs       []string
	Spawn       int  // start this many private redis-servers for the run
	Exclusive   bool // the servers serve only us: report executed cmds, Redis CPU
	N           int
	MaxTime     time.Duration
	Workers     int
	Hold        time.Duration
	Think       time.Duration
	Idle        time.Duration
	Retry       time.Duration
	TTL         time.Duration
	WaitTimeout time.Duration // bound on one Acquire
	PerWorker   bool          // contended: one driver instance (own clients) per goroutine
	Keys        string        // serial, parallel: "cycle" (new key per cycle) or "goroutine"
	Pair        string        // serial, parallel: driver to alternate with, cycle by cycle
	RenewWindow time.Duration // renew: the measuring window
	Clients     int           // contended: driver instances (own clients each), workers spread over them round-robin
	LockKeys    int           // contended: keys, one picked at random per acquisition (default 1)
	WindowProf  string        // renew: write the client's CPU profile of the measuring window only
}

func (c Config) withDefaults() Config {
	if c.N == 0 {
		c.N = map[string]int{"ping": 20000, "serial": 10000, "parallel": 20000, "contended": 2000, "renew": 100000, "memory": 100000}[c.Scenario]
		if c.Scenario == "ping" && c.Idle > 0 {
			c.N = 3000
		}
		if c.Scenario == "contended" && c.Think > 0 {
			c.N = 1000
		}
	}
	if c.Workers == 0 {
		c.Workers = map[string]int{"serial": 1, "parallel": 16, "contended": 8, "memory": 8}[c.Scenario]
	}
	if c.Scenario == "serial" {
		c.Workers = 1
	}
	if c.Hold == 0 {
		c.Hold = time.Millisecond
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.MaxTime == 0 {
		c.MaxTime = 60 * time.Second
	}
	if c.Keys == "" {
		c.Keys = "cycle"
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = 10 * time.Second
	}
	return c
}

func main() {
	maybeBackendWorker() // a contended worker of -backends: runs and exits
	var (
		cfg     Config
		addrs   string
		asJSON  bool
		matrix  string
		rounds  int
		drivers string
		out     string
		report  bool
		seed    uint64
		prims   bool
		bk      string
		bkOpt   = backendOptions{idle: 300 * time.Millisecond}
		cpuProf string
	)
	flag.StringVar(&cfg.Scenario, "scenario", "", "ping | serial | parallel | contended | renew | memory")
	flag.DurationVar(&cfg.RenewWindow, "renew-window", 10*time.Second, "renew: the measuring window (after one TTL of settling)")
	flag.StringVar(&cfg.Driver, "driver", "raw", "driver: "+strings.Join(driverNames(), ", "))
	flag.StringVar(&addrs, "addr", envOr("REDIS_ADDR", "127.0.0.1:6379"), "Redis address(es), comma-separated")
	flag.IntVar(&cfg.Spawn, "spawn", 0, "start this many private redis-servers on free loopback ports and use them")
	flag.BoolVar(&cfg.Exclusive, "exclusive", false, "the Redis servers serve only this run (enables executed-command and Redis-CPU figures)")
	flag.IntVar(&cfg.N, "n", 0, "operations to measure (default depends on the scenario)")
	flag.DurationVar(&cfg.MaxTime, "max-time", 60*time.Second, "time bound on a run")
	flag.IntVar(&cfg.Workers, "workers", 0, "goroutines (parallel default 16, contended 8, memory 8)")
	flag.DurationVar(&cfg.Hold, "hold", time.Millisecond, "contended: time the lock is held")
	flag.DurationVar(&cfg.Think, "think", 0, "contended: pause after each release before asking again")
	flag.DurationVar(&cfg.Idle, "idle", 0, "ping: sleep before each PING")
	flag.DurationVar(&cfg.Retry, "retry", 0, "waiting interval override (raw poll, redislock backoff, redsync delay)")
	flag.DurationVar(&cfg.TTL, "ttl", 10*time.Second, "lock TTL")
	flag.DurationVar(&cfg.WaitTimeout, "wait-timeout", 10*time.Second, "contended: bound on one Acquire")
	flag.IntVar(&cfg.Clients, "clients", 0, "contended: this many driver instances, each with its own clients, like separate processes; the goroutines are spread over them (default 1, or one per goroutine with -per-worker)")
	flag.IntVar(&cfg.LockKeys, "lock-keys", 1, "contended: keys to contend on, one picked at random for each acquisition")
	flag.IntVar(&poolSize, "pool", 0, "go-redis PoolSize of every client a driver opens (0: go-redis's default)")
	flag.BoolVar(&cfg.PerWorker, "per-worker", false, "contended: give each goroutine its own driver and clients, like separate processes")
	flag.StringVar(&cfg.Keys, "keys", "cycle", "serial, parallel: cycle (a new key per cycle) or goroutine (one key per goroutine, reused)")
	flag.StringVar(&cfg.Pair, "pair", "", "serial, parallel: alternate every cycle with a cycle of this driver (e.g. raw) and report both")
	flag.BoolVar(&asJSON, "json", false, "print the result as one JSON line")
	flag.StringVar(&matrix, "matrix", "", "run the matrix: smoke (quick) or full; or scale, latchkey's sweep over leases, waiters, keys, Clients and released keys")
	flag.BoolVar(&prims, "primitives", false, "matrix: run the primitives section (semaphore, read-write lock, LockAll, Campaign next to raw) instead of the lock matrix; -matrix smoke unless -matrix says otherwise")
	flag.IntVar(&rounds, "rounds", 1, "matrix: rounds, each in a new shuffled order")
	flag.StringVar(&drivers, "drivers", "", "matrix: comma-separated drivers (default: all registered single-node drivers)")
	flag.StringVar(&out, "out", "", "append every result to this JSONL file (the matrix's, or a single run's)")
	flag.BoolVar(&report, "report", false, "print tables from the JSONL files named as arguments")
	flag.Uint64Var(&seed, "seed", 0, "matrix: shuffle seed (0: random)")
	flag.StringVar(&bk, "backends", "", "run the backend comparison on these backends (comma-separated, or all: "+strings.Join(backendNames, ",")+"); -rounds, -seed, -out, -hold apply")
	flag.IntVar(&bkOpt.serialN, "backend-serial", 300, "backends: TryLock+Release cycles per serial run")
	flag.DurationVar(&bkOpt.serialT, "backend-serial-time", 3*time.Second, "backends: time bound of a serial run")
	flag.DurationVar(&bkOpt.window, "backend-window", 2*time.Second, "backends: measuring window of a contended run")
	flag.IntVar(&bkOpt.procs, "backend-procs", 4, "backends: contending worker processes, each with its own Client")
	flag.StringVar(&cpuProf, "cpuprofile", "", "write this process's CPU profile to the file (the client side of a run)")
	flag.StringVar(&cfg.WindowProf, "window-profile", "", "renew: write the client's CPU profile of the measuring window alone (no taking or releasing of the leases) to the file")
	flag.Parse()
	cfg.Addrs = strings.Split(addrs, ",")
	if cpuProf != "" {
		stop, err := startCPUProfile(cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer stop()
	}
	if prims && matrix == "" {
		matrix = "smoke"
	}

	var err error
	switch {
	case report:
		err = reportFiles(os.Stdout, flag.Args())
	case bk != "":
		if bk != "all" {
			bkOpt.names = splitList(bk)
		}
		bkOpt.rounds, bkOpt.seed, bkOpt.out, bkOpt.hold = rounds, seed, out, cfg.Hold
		_, err = runBackends(os.Stdout, bkOpt)
	case matrix != "":
		err = runMatrix(matrixOptions{
			kind: matrix, rounds: rounds, drivers: splitList(drivers), out: out,
			addrs: cfg.Addrs, spawn: cfg.Spawn, exclusive: cfg.Exclusive, seed: seed, primitives: prims,
		})
	case cfg.Scenario != "":
		var r Result
		r, err = runOne(cfg)
		if err == nil {
			if asJSON {
				err = json.NewEncoder(os.Stdout).Encode(r)
			} else {
				printResult(os.Stdout, r)
			}
		}
		if err == nil && out != "" {
			err = appendResult(out, r)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// env is what a scenario needs besides its Config.
type env struct {
	cfg     Config
	counter *Counter
	prober  *prober
	prefix  string // every key of the run starts with it
}

func (e *env) open() (Driver, error) {
	return openDriver(e.cfg.Driver, openArgs{addrs: e.cfg.Addrs, ttl: e.cfg.TTL, retry: e.cfg.Retry, counter: e.counter})
}

// openPaired returns the driver, then the -pair driver if any, each with its
// own counter (the first is e.counter).
func (e *env) openPaired() ([]Driver, []*Counter, error) {
	d, err := e.open()
	if err != nil || e.cfg.Pair == "" {
		return []Driver{d}, []*Counter{e.counter}, err
	}
	c := &Counter{}
	p, err := openDriver(e.cfg.Pair, openArgs{addrs: e.cfg.Addrs, ttl: e.cfg.TTL, counter: c})
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return []Driver{d, p}, []*Counter{e.counter, c}, nil
}

// openWorkers returns one shared driver, or one per worker with -per-worker.
func (e *env) openWorkers(workers int) ([]Driver, error) {
	n := 1
	if e.cfg.PerWorker {
		n = workers
	}
	if e.cfg.Clients > 0 {
		n = e.cfg.Clients
	}
	var ds []Driver
	for range n {
		d, err := e.open()
		if err != nil {
			for _, o := range ds {
				o.Close()
			}
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// runOne runs one scenario and cleans up its keys.
func runOne(cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if cfg.Spawn > 0 {
		srv, err := spawnServers(cfg.Spawn)
		if err != nil {
			return Result{}, err
		}
		defer srv.stop()
		cfg.Addrs, cfg.Exclusive = srv.addrs, true
	}
	admins := make([]*redis.Client, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		admins[i] = redis.NewClient(&redis.Options{Addr: a, PoolSize: 1})
		defer admins[i].Close()
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := admins[i].Ping(pctx).Err()
		cancel()
		if err != nil {
			return Result{}, fmt.Errorf("redis not reachable at %s: %w", a, err)
		}
	}
	var b [6]byte
	rand.Read(b[:])
	runID := hex.EncodeToString(b[:])
	e := &env{cfg: cfg, counter: &Counter{}, prefix: "lkbench:" + runID + ":"}
	e.prober = &prober{counter: e.counter}
	if cfg.Exclusive {
		e.prober.servers = admins
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.MaxTime)
	defer cancel()
	start := time.Now()
	var (
		r   Result
		err error
	)
	if cfg.Keys != "cycle" && cfg.Keys != "goroutine" {
		return Result{}, fmt.Errorf("-keys must be cycle or goroutine, not %q", cfg.Keys)
	}
	switch cfg.Scenario {
	case "ping":
		r, err = runPing(ctx, cfg, e)
	case "serial", "parallel":
		r, err = runCycles(ctx, cfg, e)
	case "contended":
		r, err = runContended(ctx, cfg, e)
	case "renew":
		r, err = runRenew(ctx, cfg, e)
	case "memory":
		r, err = runMemory(ctx, cfg, e)
	default:
		err = fmt.Errorf("unknown scenario %q", cfg.Scenario)
	}
	if cerr := cleanup(admins, runID); err == nil && cerr != nil {
		err = fmt.Errorf("cleanup: %w", cerr)
	}
	describe(&r, cfg)
	r.Start = start.UTC().Format(time.RFC3339)
	r.Target = cfg.N
	return r, err
}

// cleanup deletes every key whose name contains the run's id, on every server.
func cleanup(admins []*redis.Client, runID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range admins {
		iter := a.Scan(ctx, 0, "*"+runID+"*", 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := a.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := a.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendResult appends r to the JSONL file path, for -report to read.
func appendResult(path string, r Result) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	line, _ := json.Marshal(r)
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
