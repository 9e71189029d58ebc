package main

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// probe is a snapshot of everything a run reports besides its own timings:
// the driver's command counts, this process's CPU, the machine's CPU
// accounting and, when the Redis servers are ours alone, their command and
// CPU totals.
type probe struct {
	at        time.Time
	counts    Counts
	clientCPU time.Duration
	jiffies   [8]uint64 // user nice system idle iowait irq softirq steal
	redisOK   bool
	redisCmds int64 // commandstats calls, all servers
	redisCPU  time.Duration
}

// prober takes probes. servers is nil when Redis is shared with others, in
// which case executed-command and Redis-CPU figures are reported as unknown.
type prober struct {
	counter *Counter
	servers []*redis.Client
}

func (p *prober) take(ctx context.Context) probe {
	// The run's own time bound (-max-time) may have ended ctx: the probe
	// that closes a cut-short run still reads the servers.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	pr := probe{at: time.Now(), counts: p.counter.Snapshot(), clientCPU: selfCPU(), jiffies: procStat()}
	if len(p.servers) > 0 {
		pr.redisOK = true
		for _, s := range p.servers {
			calls, cpu, err := redisTotals(ctx, s)
			if err != nil {
				pr.redisOK = false
				break
			}
			pr.redisCmds += calls
			pr.redisCPU += cpu
		}
	}
	return pr
}

// fill writes the per-op usage between two probes into r.
func (p *prober) fill(r *Result, a, b probe, ops int) {
	d := b.counts.Sub(a.counts)
	r.Cmds = perOp(float64(d.Cmds), ops)
	r.Trips = perOp(float64(d.Trips), ops)
	r.Wire = perOp(float64(d.Wire), ops)
	r.Dials = d.Dials
	client := b.clientCPU - a.clientCPU
	r.ClientCPU = perOp(us(client), ops)
	r.Executed, r.RedisCPU, r.OtherPct = -1, -1, -1
	var redisCPU time.Duration
	if a.redisOK && b.redisOK {
		// Each probe's INFO call is itself one executed command per server.
		execd := b.redisCmds - a.redisCmds - int64(len(p.servers))
		r.Executed = perOp(float64(execd), ops)
		redisCPU = b.redisCPU - a.redisCPU
		r.RedisCPU = perOp(us(redisCPU), ops)
	}
	var dj [8]float64
	total := 0.0
	for i := range dj {
		dj[i] = float64(b.jiffies[i] - a.jiffies[i])
		total += dj[i]
	}
	if total <= 0 {
		return
	}
	r.StealPct = 100 * dj[7] / total
	if r.RedisCPU >= 0 {
		// user + nice + system: irq and softirq time (on loopback, mostly
		// this benchmark's own packets) is left out rather than guessed at.
		busy := dj[0] + dj[1] + dj[2]
		ours := (client + redisCPU).Seconds() * 100 // USER_HZ is 100 on Linux
		r.OtherPct = max(0, 100*(busy-ours)/total)
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat reads the aggregate CPU line of /proc/stat (zeros if absent).
func procStat() (j [8]uint64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return j
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return j
	}
	fields := strings.Fields(sc.Text())
	for i := 0; i < 8 && i+1 < len(fields); i++ {
		j[i], _ = strconv.ParseUint(fields[i+1], 10, 64)
	}
	return j
}

// redisTotals returns the number of commands a server has executed (the sum
// of calls in INFO commandstats, which includes calls made from Lua) and its
// CPU time.
func redisTotals(ctx context.Context, rdb *redis.Client) (calls int64, cpu time.Duration, err error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			_, rest, _ := strings.Cut(line, ":calls=")
			n, _, _ := strings.Cut(rest, ",")
			v, _ := strconv.ParseInt(n, 10, 64)
			calls += v
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			f, _ := strconv.ParseFloat(v, 64)
			cpu += time.Duration(f * float64(time.Second))
		}
	}
	return calls, cpu, nil
}
