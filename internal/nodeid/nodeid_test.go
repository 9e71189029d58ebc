package nodeid_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/internal/nodeid"
)

func TestDefault(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	id := nodeid.Default(256)
	if !strings.HasSuffix(id, ":"+pid) || len(id) <= len(pid)+1 {
		t.Fatalf("Default(256) = %q, want <host>:%s", id, pid)
	}
	if got := nodeid.Default(len(pid) + 1); got != "node:"+pid && got != id {
		t.Fatalf("Default(%d) = %q, want node:%s", len(pid)+1, got, pid)
	}
	if host, _ := os.Hostname(); len(host) > 1 {
		if got := nodeid.Default(len(pid) + 1); got != "node:"+pid {
			t.Fatalf("Default(%d) with host %q = %q, want node:%s", len(pid)+1, host, got, pid)
		}
	}
}
