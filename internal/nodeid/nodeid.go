// Package nodeid names the running process for records that say who did
// something (cronlock's claims and LastRun, temporallock's lease metadata).
package nodeid

import (
	"os"
	"strconv"

	"github.com/latchkey/latchkey/internal/name"
)

// Default returns "<hostname>:<pid>", or "node:<pid>" when the host name is
// unknown or the result would break name.Check(id, max).
func Default(max int) string {
	pid := strconv.Itoa(os.Getpid())
	if host, err := os.Hostname(); err == nil && host != "" {
		if id := host + ":" + pid; name.Check(id, max) == "" {
			return id
		}
	}
	return "node:" + pid
}
