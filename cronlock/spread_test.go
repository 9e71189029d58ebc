package cronlock_test

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/redistest"
)

// TestSpreadRealRedis measures how the runs spread over three real nodes
// — each with its own Redis connection pool, core.Client, Locker and
// cron.Cron, as three processes would — on a real Redis, over about ten
// one-second ticks of each of the fleet's two jobs (WithSpread, the
// default). A tick prefers the node that ran the job least recently, so
// the runs go round the nodes: in nearly every three ticks in a row, each
// node ran one. It logs the runners in order and the runs per node.
//
// Without spreading, whichever node reaches Redis first runs the tick: a
// window of three ticks has three runners 2 times in 9 by chance, and
// streaks of one node are common; with only the last runner stepping back
// (the first WithSpread), half the windows. So at least 80% of windows
// with three runners cannot happen by chance.
func TestSpreadRealRedis(t *testing.T) {
	t.Parallel()
	admin := redistest.Client(t) // skips (or fails) without a Redis
	prefix := "cronlock-test-" + rand.Text()[:10]
	t.Cleanup(func() { deleteKeys(t, admin, prefix+":*") })

	nodes := []fleetNode{{id: "n1"}, {id: "n2"}, {id: "n3"}}
	f := runFleet(t, admin.Options().Addr, prefix, nodes, func() {
		time.Sleep(10500 * time.Millisecond) // ten or eleven ticks
	})

	byNode := map[string]int{}
	windows, rotations := 0, 0
	for _, j := range fleetJobs {
		ticks, got := f.ticks(j.name)
		var seq []string // the runner of each tick, "-" for none or several
		for i, tk := range ticks {
			runner := "-"
			if len(got[tk]) == 1 {
				runner = got[tk][0]
				byNode[runner]++
			}
			seq = append(seq, runner)
			if i < 2 || ticks[i].Sub(ticks[i-2]) != 2*time.Second || strings.Contains(strings.Join(seq[i-2:], ""), "-") {
				continue // three ticks in a row, each run once
			}
			windows++
			if a, b, c := seq[i-2], seq[i-1], seq[i]; a != b && b != c && a != c {
				rotations++
			}
		}
		t.Logf("%s: runners in tick order: %s", j.name, strings.Join(seq, " "))
	}
	t.Logf("runs per node: %v; windows of three ticks run by three nodes: %d of %d", byNode, rotations, windows)
	if windows < 12 {
		t.Fatalf("only %d windows of three ticks in a row in 10.5 s (the machine stalled?)", windows)
	}
	if len(byNode) != 3 {
		t.Errorf("runs on %d nodes, want 3: %v", len(byNode), byNode)
	}
	if rotations*5 < windows*4 {
		t.Errorf("%d of %d windows of three ticks ran on three nodes, want at least 80%%", rotations, windows)
	}
}
