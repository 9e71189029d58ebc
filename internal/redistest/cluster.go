package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterCreateTimeout bounds redis-cli --cluster create.
	clusterCreateTimeout = 30 * time.Second
	// clusterReadyTimeout bounds the wait for every node to report
	// cluster_state:ok with all slots assigned.
	clusterReadyTimeout = 10 * time.Second
	// clusterCommandTimeout bounds one command sent to a node.
	clusterCommandTimeout = 2 * time.Second
)

// Cluster is a Redis Cluster of masters without replicas, started by a
// test. Its nodes are [Server]s, stopped in t.Cleanup like any other.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts a Redis Cluster of the given number of masters (no
// replicas) on free 127.0.0.1 ports and waits until it is usable, failing
// the test otherwise. It calls [Unavailable] if redis-server or redis-cli
// is not on PATH.
//
// Each node runs redis-server --cluster-enabled yes --cluster-config-file
// <dir>/nodes.conf --cluster-node-timeout 2000 (its cluster bus port is its
// port + 10000). With 3 masters or more the cluster is created with
// redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes, which
// splits the slots evenly in node order; redis-cli refuses fewer than 3
// masters, so for 1 or 2 the slots are split and the nodes introduced with
// CLUSTER ADDSLOTSRANGE, SET-CONFIG-EPOCH and MEET instead. Either way
// StartCluster then waits (at most 10 s) until every node reports
// cluster_state:ok, all 16384 slots assigned and every other node known.
//
// StartCluster takes about 2 s whatever the number of masters: Redis keeps
// a freshly started master in cluster_state:fail for 2 s (its rejoin
// delay). Share a cluster between the subtests of one test where you can.
//
// Killing a node with [Server.Kill] takes its slots out (the cluster reports
// cluster_state:fail after the 2 s node timeout, since there are no
// replicas); [Server.Restart] brings it back with its slots but no keys
// (see [Cluster.WaitReady]).
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: StartCluster: %d masters; want at least 1", masters)
	}
	cli := ""
	if masters >= 3 {
		var err error
		cli, err = exec.LookPath("redis-cli")
		if err != nil {
			Unavailable(t, "redis-cli is not on PATH: %v", err)
		}
	}

	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, startServer(t, true, nil))
	}
	if masters >= 3 {
		c.create(t, cli)
	} else {
		c.bootstrap(t)
	}
	c.WaitReady(t)
	return c
}

// ansiEscape matches the color codes in redis-cli's output.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// create runs redis-cli --cluster create on the nodes.
func (c *Cluster) create(t testing.TB, cli string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timeout %v)", err, clusterCreateTimeout)
		}
		t.Fatalf("redistest: %s %s: %v\n%s\n%s", cli, strings.Join(args, " "), err,
			ansiEscape.ReplaceAllString(string(out), ""), c.logTails())
	}
}

// bootstrap builds the cluster without redis-cli: it splits the slots
// evenly in node order, gives each node its own config epoch, and has the
// first node meet the others.
func (c *Cluster) bootstrap(t testing.TB) {
	t.Helper()
	n := len(c.nodes)
	do := func(s *Server, args ...string) {
		t.Helper()
		if _, err := command(s.Addr(), clusterCommandTimeout, args...); err != nil {
			t.Fatalf("redistest: %s on %s: %v\n%s", strings.Join(args, " "), s.Addr(), err, c.logTails())
		}
	}
	for i, s := range c.nodes {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		do(s, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))
		do(s, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
	}
	for _, s := range c.nodes[1:] {
		do(c.nodes[0], "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port()))
	}
}

// WaitReady waits, at most 10 s, until every node reports cluster_state:ok,
// all 16384 slots assigned and every other node known, and fails the test
// otherwise. StartCluster calls it; call it after restarting a node with
// [Server.Restart], which only waits for the node to answer: a restarted
// master reports cluster_state:fail for about 2 s (Redis' rejoin delay), and
// the cluster answers CLUSTERDOWN for its slots meanwhile. It cannot succeed
// while a node is killed or paused.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	timeout := clusterReadyTimeout
	deadline := time.Now().Add(timeout)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
	}
	for {
		problem := ""
		for _, s := range c.nodes {
			reply, err := command(s.Addr(), probeTimeout, "CLUSTER", "INFO")
			if err != nil {
				problem = fmt.Sprintf("CLUSTER INFO on %s: %v", s.Addr(), err)
				break
			}
			info := parseInfo(reply)
			for k, v := range want {
				if info[k] != v {
					problem = fmt.Sprintf("%s reports %s:%s, want %s", s.Addr(), k, info[k], v)
					break
				}
			}
			if problem != "" {
				break
			}
		}
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster %v not ready within %v: %s\n%s", c.Addrs(), timeout, problem, c.logTails())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTails returns the last log lines of every node, for failure messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, s := range c.nodes {
		fmt.Fprintf(&b, "last lines of the log of %s:\n%s\n", s.Addr(), logTail(s.logPath, 10))
	}
	return b.String()
}

// Addrs returns the addresses of the nodes, "127.0.0.1:port", in the order
// of [Cluster.Nodes].
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a *redis.ClusterClient on the cluster, closed in t.Cleanup.
//
// The client is created with ContextTimeoutEnabled, so context deadlines
// bound its commands; other options are go-redis defaults.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Nodes returns the nodes of the cluster, in the order of [Cluster.Addrs];
// node i owns the i-th of n (nearly) equal ranges of slots. Kill, Restart,
// Pause and Resume them to simulate failures.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}
