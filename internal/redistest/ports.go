package redistest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

const (
	// clusterBusOffset is the distance from a node's port to its cluster bus
	// port (Redis' default).
	clusterBusOffset = 10000
	// maxPort is the highest port handed out, so that port+clusterBusOffset
	// is still a valid port.
	maxPort = 65535 - clusterBusOffset
	// portAttempts bounds the search for a free port.
	portAttempts = 100
)

// reserved holds the ports handed out by this process and not yet released,
// so that two servers started concurrently never get the same port (or one
// server's port is never another node's bus port).
var reserved struct {
	sync.Mutex
	ports map[int]bool
}

// reservePorts finds a free loopback port p below maxPort such that p+10000
// (the cluster bus port) is free too, and reserves both within this process.
// It listens on 127.0.0.1:0 and closes the listener, so another process can
// still take the port before redis-server binds it: callers retry then.
func reservePorts() (int, error) {
	var lastErr error
	for range portAttempts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port > maxPort {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
		if err != nil {
			l.Close()
			lastErr = err
			continue
		}
		bus.Close()
		l.Close()

		reserved.Lock()
		if reserved.ports == nil {
			reserved.ports = make(map[int]bool)
		}
		taken := reserved.ports[port] || reserved.ports[port+clusterBusOffset]
		if !taken {
			reserved.ports[port] = true
			reserved.ports[port+clusterBusOffset] = true
		}
		reserved.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port pair (port, port+%d) below %d after %d attempts (last error: %v)",
		clusterBusOffset, maxPort+1, portAttempts, lastErr)
}

// releasePorts undoes reservePorts(port).
func releasePorts(port int) {
	reserved.Lock()
	delete(reserved.ports, port)
	delete(reserved.ports, port+clusterBusOffset)
	reserved.Unlock()
}
