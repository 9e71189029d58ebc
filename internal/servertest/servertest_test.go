package servertest_test

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/servertest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Each server answers on the address returned, and is gone once the test
// that started it has ended.
func TestStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t testing.TB) string
	}{
		{"etcd", func(t testing.TB) string {
			u, err := url.Parse(servertest.StartEtcd(t))
			if err != nil || u.Scheme != "http" {
				t.Fatalf("client URL %v (%v), want http://host:port", u, err)
			}
			return u.Host
		}},
		{"zookeeper", servertest.StartZooKeeper},
		{"memcached", servertest.StartMemcached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var addr string
			t.Run("start", func(t *testing.T) {
				addr = tc.start(t)
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					t.Fatalf("%s at %s: %v", tc.name, addr, err)
				}
				c.Close()
			})
			if addr == "" {
				return // skipped
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Errorf("%s at %s still answers after its test ended", tc.name, addr)
			}
		})
	}
}

// A missing program skips the test (fails it with
// LATCHKEY_REQUIRE_SERVERS=1), naming what is missing.
func TestMissing(t *testing.T) {
	if os.Getenv("LATCHKEY_REQUIRE_SERVERS") == "1" {
		t.Skip("LATCHKEY_REQUIRE_SERVERS=1 makes a missing server fail")
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := exec.LookPath("memcached"); err == nil {
		t.Fatal("memcached found on an empty PATH")
	}
	ok := t.Run("memcached", func(t *testing.T) { servertest.StartMemcached(t) })
	if !ok {
		t.Error("StartMemcached without memcached on PATH failed the test, want a skip")
	}
}
