package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// memoryInspectSample is how many of the keys a run leaves get a MEMORY
// USAGE call each (the mean is reported next to used_memory's rise).
const memoryInspectSample = 100

// runMemory measures what Redis keeps once a lock is released: cfg.N
// distinct keys (default 100,000), each acquired once (TryAcquire) and
// released at once, by cfg.Workers goroutines (default 8). It needs a
// server of its own (-spawn 1, or -exclusive): around the cycles it reads
// the server's used_memory (INFO memory) and DBSIZE, and afterwards looks
// at every key that was not there before the cycles: how many, how many
// have no expiry (PTTL -1), the largest PTTL, and the mean MEMORY USAGE of
// up to 100 of them. An op is one acquire+release cycle.
//
// No driver is connected at either reading of used_memory, so the
// connections' buffers, which grow with the traffic and not with the
// keys, are in neither: a warm-up driver loads the scripts and is closed,
// and the driver that runs the cycles is opened after the reading before
// them and closed, and its connections gone from the server, before the
// reading after them (its first cycles pay for its dials).
func runMemory(ctx context.Context, cfg Config, e *env) (Result, error) {
	if len(e.prober.servers) == 0 {
		return Result{}, errors.New("-scenario memory reads the server's memory and keys: give it a server of its own (-spawn 1, or -exclusive)")
	}
	admin := e.prober.servers[0]
	idle, err := connectedClients(ctx, admin) // the benchmark's own admin connection
	if err != nil {
		return Result{}, err
	}

	// What the warm-up's keys leave is in the "before" figures.
	w, err := e.open()
	if err != nil {
		return Result{}, err
	}
	_, errs := memoryCycles(ctx, w, e.prefix+"warm:", 4*cfg.Workers, cfg.Workers)
	w.Close()
	if errs > 0 {
		return Result{}, fmt.Errorf("warm-up: %d cycles failed", errs)
	}
	if err := awaitClients(ctx, admin, idle); err != nil {
		return Result{}, err
	}
	// Redis (7.0 on) allocates a latency histogram for each command the
	// first time it runs, tens of kilobytes: the first reading runs
	// DBSIZE and SCAN once, so the second sees their histograms already
	// there.
	if _, err := readMemory(ctx, admin, true); err != nil {
		return Result{}, fmt.Errorf("before: %w", err)
	}
	before, err := readMemory(ctx, admin, true)
	if err != nil {
		return Result{}, fmt.Errorf("before: %w", err)
	}

	d, err := e.open()
	if err != nil {
		return Result{}, err
	}
	var r Result
	a := e.prober.take(ctx)
	t0 := time.Now()
	samples, errs := memoryCycles(ctx, d, e.prefix+"mem:", cfg.N, cfg.Workers)
	r.Seconds = time.Since(t0).Seconds()
	b := e.prober.take(ctx)
	if err := d.Close(); err != nil {
		return Result{}, err
	}

	actx := context.WithoutCancel(ctx) // a cut-short run is still inspected
	if err := awaitClients(actx, admin, idle); err != nil {
		return Result{}, err
	}
	after, err := readMemory(actx, admin, false)
	if err != nil {
		return Result{}, fmt.Errorf("after: %w", err)
	}
	left, err := inspectLeft(actx, admin, before.keys)
	if err != nil {
		return Result{}, fmt.Errorf("inspecting the keys left: %w", err)
	}

	sum := samples.Summarize()
	r.Ops, r.Errors = sum.N, errs
	r.Truncated = r.Ops+r.Errors < cfg.N
	r.Rate = float64(r.Ops) / r.Seconds
	r.P50, r.P99, r.Max, r.Mean = sum.P50, sum.P99, sum.Max, samples.Mean()
	e.prober.fill(&r, a, b, r.Ops)
	r.MemBefore, r.MemAfter = before.used, after.used
	r.DBSizeBefore, r.DBSizeAfter = before.dbsize, after.dbsize
	r.KeysLeft, r.NoExpiry, r.MaxPTTLMS = left.n, left.noExpiry, left.maxPTTL
	r.KeyBytes, r.LeftExample = left.meanUsage, left.example
	r.BytesPerKey = perOp(float64(after.used-before.used), r.Ops)
	return r, nil
}

// memoryCycles acquires and releases the keys prefix+"0" … prefix+(n-1),
// each once, with workers goroutines. It returns the cycles' durations
// and the number of cycles that failed (busy or an error). Releases run
// to the end even when ctx has ended, so no lease outlives the run.
func memoryCycles(ctx context.Context, d Driver, prefix string, n, workers int) (Samples, int) {
	var (
		next   atomic.Int64
		failed atomic.Int64
		mu     sync.Mutex
		all    = make(Samples, 0, n)
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := make(Samples, 0, n/workers+1)
			defer func() {
				mu.Lock()
				all = append(all, own...)
				mu.Unlock()
			}()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				h, err := d.TryAcquire(ctx, prefix+strconv.Itoa(i))
				if err != nil {
					failed.Add(1)
					continue
				}
				if err := h.Release(context.WithoutCancel(ctx)); err != nil {
					failed.Add(1)
					continue
				}
				own.Add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return all, int(failed.Load())
}

// memorySnapshot is a server's memory and key count at one moment, and
// its key names when asked for.
type memorySnapshot struct {
	used   int64 // INFO memory used_memory, bytes
	dbsize int64
	keys   map[string]bool
}

func readMemory(ctx context.Context, rdb *redis.Client, withKeys bool) (memorySnapshot, error) {
	var s memorySnapshot
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return s, err
	}
	if s.used, err = infoInt(info, "used_memory"); err != nil {
		return s, err
	}
	if s.dbsize, err = rdb.DBSize(ctx).Result(); err != nil {
		return s, err
	}
	if withKeys {
		s.keys = map[string]bool{}
		err = scanAll(ctx, rdb, func(k string) { s.keys[k] = true })
	}
	return s, err
}

// awaitClients waits until the server counts at most n connected clients.
// A client closes its connections at once, but the server frees one (and
// its buffers, some 20 KB) only when its event loop reads the end of it,
// which can come after the next INFO.
func awaitClients(ctx context.Context, rdb *redis.Client, n int64) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := connectedClients(ctx, rdb)
		if err != nil || c <= n {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d clients still connected after 5 s, want at most %d (does someone else use this server?)", c, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func connectedClients(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	return infoInt(info, "connected_clients")
}

// infoInt returns the integer field name of an INFO reply.
func infoInt(info, name string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", name)
}

// scanAll calls f once for every key of the server's database.
func scanAll(ctx context.Context, rdb *redis.Client, f func(string)) error {
	seen := map[string]bool{} // SCAN may return a key twice
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !seen[k] {
			seen[k] = true
			f(k)
		}
	}
	return iter.Err()
}

// leftKeys describes the keys a run left.
type leftKeys struct {
	n, noExpiry int
	maxPTTL     int64 // ms
	meanUsage   float64
	example     string
}

// inspectLeft reads the PTTL of every key that is not in before, and the
// MEMORY USAGE of the first memoryInspectSample of them. A key that expired
// meanwhile (PTTL -2) is not counted.
func inspectLeft(ctx context.Context, rdb *redis.Client, before map[string]bool) (leftKeys, error) {
	var (
		out   leftKeys
		batch []string
		usage []int64
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		pipe := rdb.Pipeline()
		pttls := make([]*redis.DurationCmd, len(batch))
		for i, k := range batch {
			pttls[i] = pipe.PTTL(ctx, k)
		}
		var mems []*redis.IntCmd
		for _, k := range batch[:min(len(batch), memoryInspectSample-len(usage))] {
			mems = append(mems, pipe.MemoryUsage(ctx, k, 0))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, c := range pttls {
			switch ttl := c.Val(); ttl {
			case -2: // gone
				continue
			case -1:
				out.noExpiry++
			default:
				out.maxPTTL = max(out.maxPTTL, ttl.Milliseconds())
			}
			out.n++
			if out.example == "" {
				out.example = batch[i]
			}
		}
		for _, c := range mems {
			if c.Err() == nil {
				usage = append(usage, c.Val())
			}
		}
		batch = batch[:0]
		return nil
	}
	var ferr error
	err := scanAll(ctx, rdb, func(k string) {
		if before[k] || ferr != nil {
			return
		}
		if batch = append(batch, k); len(batch) == 1000 {
			ferr = flush()
		}
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = flush()
	}
	if len(usage) > 0 {
		var t int64
		for _, u := range usage {
			t += u
		}
		out.meanUsage = float64(t) / float64(len(usage))
	}
	return out, err
}
