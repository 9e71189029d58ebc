package core_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// A faultProxy is an in-process toxiproxy between one client and Redis, on
// 127.0.0.1. It is stopped (every connection through it closed) when the
// test ends; stop it sooner with cut.
type faultProxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

// startProxy starts a proxy to upstream and returns it; Addr is where
// clients connect.
func startProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "redis-"+rand.Text()[:8], "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy: start: %v", err)
	}
	t.Cleanup(p.Stop)
	return &faultProxy{t: t, p: p}
}

// Addr returns the proxy's listening address.
func (fp *faultProxy) Addr() string { return fp.p.Listen }

// add installs a toxic: typ is a toxiproxy toxic type (latency, timeout,
// reset_peer, ...), stream "upstream" (client to Redis) or "downstream".
// It returns a function that removes it.
func (fp *faultProxy) add(name, typ, stream string, attrs map[string]int64) (remove func()) {
	fp.t.Helper()
	spec, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": 1, "attributes": attrs,
	})
	if err != nil {
		fp.t.Fatalf("toxiproxy: %v", err)
	}
	if _, err := fp.p.Toxics.AddToxicJson(strings.NewReader(string(spec))); err != nil {
		fp.t.Fatalf("toxiproxy: add %s: %v", name, err)
	}
	return func() {
		if err := fp.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
			fp.t.Errorf("toxiproxy: remove %s: %v", name, err)
		}
	}
}

// cut closes every connection through the proxy and refuses new ones until
// the returned function starts it again on the same address.
func (fp *faultProxy) cut() (restore func()) {
	fp.p.Stop()
	return func() {
		if err := fp.p.Start(); err != nil {
			fp.t.Errorf("toxiproxy: restart: %v", err)
		}
	}
}
