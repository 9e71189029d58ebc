// Package demo gives the example programs their servers: a real Redis when
// REDIS_URL is set, else an embedded miniredis.
package demo

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/mrclock"
	"github.com/redis/go-redis/v9"
)

// Redis returns a client for $REDIS_URL (redis://host:port/db), or for an
// embedded miniredis when it is unset, a description of which, and a
// cleanup function.
func Redis() (redis.UniversalClient, string, func(), error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb := redis.NewClient(opt)
		return rdb, "Redis at " + opt.Addr, func() { rdb.Close() }, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	stop := mrclock.Run(mr)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, "embedded miniredis (set REDIS_URL for a real server)", func() { rdb.Close(); stop(); mr.Close() }, nil
}

// Env is what an example program starts with: its telemetry (-trace) and
// its Redis.
type Env struct {
	Tel   *Telemetry
	Redis redis.UniversalClient
	close func()
}

// Start parses the -trace flag, sets up telemetry for service and opens
// Redis (see Redis), printing which; it exits the program on failure.
// Close reports the telemetry and closes what Start opened.
func Start(service string) *Env {
	traceOn := flag.Bool("trace", false, "print OpenTelemetry spans (stdout exporter) and a metrics summary")
	flag.Parse()
	tel, err := SetupTelemetry(service, *traceOn)
	if err != nil {
		log.Fatal(err)
	}
	rdb, where, cleanup, err := Redis()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("using", where)
	return &Env{Tel: tel, Redis: rdb, close: func() { cleanup(); tel.Report() }}
}

// Close closes Redis and reports the telemetry.
func (e *Env) Close() { e.close() }
