package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as a contended worker of the backend
// comparison (it re-executes itself with $LKBENCH_BACKEND_WORKER set).
func TestMain(m *testing.M) {
	maybeBackendWorker()
	os.Exit(m.Run())
}

// requireServers is LATCHKEY_REQUIRE_SERVERS=1: a missing server fails.
func requireServers() bool { return os.Getenv("LATCHKEY_REQUIRE_SERVERS") == "1" }

// TestBackendsSection runs the backend comparison briefly on every backend
// (worker processes included) and checks its invariants and cleanup.
func TestBackendsSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, ZooKeeper and memcached")
	}
	var buf bytes.Buffer
	skipped, err := runBackends(&buf, backendOptions{rounds: 1, serialN: 20, serialT: 5 * time.Second,
		window: 400 * time.Millisecond, procs: 3, hold: time.Millisecond, quiet: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for n, why := range skipped {
		if requireServers() {
			t.Errorf("%s skipped: %s", n, why)
		} else {
			t.Logf("%s skipped: %s", n, why)
		}
	}
	out := buf.String()
	for _, n := range backendNames {
		if _, ok := skipped[n]; ok {
			continue
		}
		if !strings.Contains(out, "| "+n+" | ") {
			t.Errorf("no row for %s:\n%s", n, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		// overlaps / fence regressions / errors
		if f := strings.Split(line, " | "); len(f) > 10 && !strings.HasPrefix(line, "| backend") && strings.Contains(f[9], " / ") && f[9] != "0 / 0 / 0" {
			t.Errorf("invariant broken: %s", line)
		}
	}
}

// BenchmarkBackends/<backend>: one Client, TryLock+Release cycles on a new
// key each, on every backend (private etcd, ZooKeeper and memcached started
// for the benchmark; Redis, PostgreSQL and MariaDB shared; SQLite in a
// temporary file), reporting requests/op where the backend counts them.
func BenchmarkBackends(b *testing.B) {
	runID := fmt.Sprintf("gobench%d", time.Now().UnixNano())
	for _, name := range backendNames {
		b.Run(name, func(b *testing.B) {
			s, err := setupBackend(name, runID, 10*time.Second)
			if errors.Is(err, errUnavailable) && !requireServers() {
				b.Skip(err)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := s.cleanup(); err != nil {
					b.Error(err)
				}
			})
			bc, err := openBackend(s.conf)
			if err != nil {
				b.Fatal(err)
			}
			defer bc.Close()
			ctx := context.Background()
			prefix := "lkbench:" + runID + ":" + name + ":"
			cycle := func(key string) {
				l, err := bc.c.TryLock(ctx, key)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			for i := range 10 {
				cycle(fmt.Sprintf("%swarm:%d", prefix, i))
			}
			before, c0 := readCounts(s), bc.clientCounts()
			b.ResetTimer()
			for i := range b.N {
				cycle(fmt.Sprintf("%s%d", prefix, i))
			}
			b.StopTimer()
			d := mergeCounts(subCounts(before, readCounts(s), s.overhead), subCounts(c0, bc.clientCounts(), nil))
			if v, ok := d["reqs"]; ok {
				b.ReportMetric(v/float64(b.N), "requests/op")
			}
			if v, ok := d["commits"]; ok {
				b.ReportMetric(v/float64(b.N), "commits/op")
			}
		})
	}
}
