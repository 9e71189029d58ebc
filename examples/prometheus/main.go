// Command prometheus serves latchkey's metrics to Prometheus: package otel
// records them on an OpenTelemetry MeterProvider whose reader is the
// OpenTelemetry Prometheus exporter, and /metrics serves what it exposes.
// A small workload — locks with contention, a timeout and a loss, a
// semaphore, leader election, a read-write lock, cron ticks on three nodes,
// Idempotency-Key and once-per-day requests, stock deductions per strategy —
// fills every series the Grafana dashboard (dashboards/latchkey.json) reads.
//
// By default it runs the workload once, scrapes its own /metrics with an
// HTTP GET on loopback, prints the latchkey series it found and exits. With
// -serve it keeps serving on the given address and repeats the workload
// every few seconds, so a real Prometheus (and the dashboard) sees rates
// move; it stops on Ctrl-C.
//
//	cd examples && go run ./prometheus                     # embedded miniredis and SQLite
//	cd examples && go run ./prometheus -serve :9464        # for a real Prometheus, until Ctrl-C
//	cd examples && go run ./prometheus -serve :9464 -every 1s
//	cd examples && REDIS_URL=redis://127.0.0.1:6379/0 go run ./prometheus
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/examples/internal/demo"
)

func main() {
	serve := flag.String("serve", "", "keep serving /metrics on this address (\":9464\") and repeat the workload until interrupted")
	every := flag.Duration("every", 5*time.Second, "with -serve: how often the workload repeats")
	flag.Parse()
	if err := run(*serve, *every); err != nil {
		log.Fatal(err)
	}
}

func run(serve string, every time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tel, err := newTelemetry("examples/prometheus")
	if err != nil {
		return err
	}
	defer tel.Shutdown()

	rdb, where, closeRedis, err := demo.Redis()
	if err != nil {
		return err
	}
	defer closeRedis()
	fmt.Println("using", where)

	addr := serve
	if addr == "" {
		addr = "127.0.0.1:0" // a free port on loopback, for the one scrape
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.Handler)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()

	w, err := newWorkload(rdb, tel.Inst, fmt.Sprintf("demo:prom:%d", time.Now().UnixNano()))
	if err != nil {
		return err
	}
	defer w.Close()

	// One round, bounded in time, then a scrape taken while a leader leads,
	// a permit is held and an acquisition waits, so that the gauges are
	// not all zero.
	roundCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := w.Round(roundCtx); err != nil {
		return err
	}
	release, err := w.Hold(roundCtx)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	body, series, err := scrapeWaiting(roundCtx, url)
	release()
	if err != nil {
		return err
	}
	fmt.Printf("workload ran in %v; GET %s: %d bytes, %d samples\n",
		time.Since(start).Round(10*time.Millisecond), url, len(body), len(series))
	printExcerpt(series)

	if serve == "" {
		return nil
	}
	fmt.Printf("serving http://%s/metrics (workload every %v) until interrupted\n", ln.Addr(), every)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("stopping")
			return nil
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, every+30*time.Second)
			err := w.Round(rctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// scrape GETs url, as Prometheus does, and returns the body.
func scrape(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// The classic text format, which parseExposition reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

// scrapeWaiting scrapes url until the exposition shows the waiter that
// Hold started (it registers a moment after Hold returns), or for two
// seconds at most, and returns the last scrape.
func scrapeWaiting(ctx context.Context, url string) (string, []sample, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		body, err := scrape(ctx, url)
		if err != nil {
			return "", nil, err
		}
		series, err := parseExposition(body)
		if err != nil {
			return "", nil, err
		}
		waiting := slices.ContainsFunc(series, func(s sample) bool { return s.Name == "latchkey_lock_waiters" && s.Value != "0" })
		if waiting || time.Now().After(deadline) {
			return body, series, nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return "", nil, err
		}
	}
}

// printExcerpt prints one line per latchkey metric as Prometheus names it
// (a histogram's _bucket, _count and _sum on one line): how many series it
// has, the labels that vary (a histogram's _bucket also has le) and, for
// the gauges, the non-zero values; then the labels every series carries.
func printExcerpt(all []sample) {
	type entry struct {
		n      int
		labels map[string]bool
		values []string
	}
	byName := map[string]*entry{}
	var common map[string]bool // labels on every latchkey series
	for _, s := range all {
		name, ok := strings.CutSuffix(s.Name, "_bucket")
		if !strings.HasPrefix(name, "latchkey_") {
			continue
		}
		if common == nil {
			common = map[string]bool{}
			for k := range s.Labels {
				common[k] = true
			}
		}
		maps.DeleteFunc(common, func(k string, _ bool) bool { _, ok := s.Labels[k]; return !ok })
		if ok || strings.HasSuffix(name, "_sum") {
			continue // a histogram's: counted by its _count
		}
		if base, ok := strings.CutSuffix(name, "_count"); ok && strings.HasSuffix(base, "_seconds") {
			name = base + "_{bucket,count,sum}"
		}
		e := byName[name]
		if e == nil {
			e = &entry{labels: map[string]bool{}}
			byName[name] = e
		}
		e.n++
		for k := range s.Labels {
			e.labels[k] = true
		}
		if (name == "latchkey_lock_held_count" || name == "latchkey_lock_waiters") && s.Value != "0" {
			e.values = append(e.values, fmt.Sprintf("%s/%s=%s", s.Labels["latchkey_lock_kind"], s.Labels["latchkey_lock_name"], s.Value))
		}
	}
	fmt.Println("series per metric, labels without their latchkey_ prefix:")
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		e := byName[n]
		var labels []string
		for _, l := range slices.Sorted(maps.Keys(e.labels)) {
			if !common[l] {
				labels = append(labels, strings.TrimPrefix(l, "latchkey_"))
			}
		}
		line := fmt.Sprintf("  %-60s %2d  %s", n, e.n, strings.Join(labels, ","))
		if len(e.values) > 0 {
			slices.Sort(e.values)
			line += "  now: " + strings.Join(e.values, " ")
		}
		fmt.Println(line)
	}
	fmt.Printf("every series also carries %s; dashboards/latchkey.json reads them\n",
		strings.Join(slices.Sorted(maps.Keys(common)), ", "))
}
