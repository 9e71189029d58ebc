package cronlock

import (
	"context"
	"time"
)

// maxRecent is how many of the nodes that ran a job last its record keeps
// (WithSpread).
const maxRecent = 8

// recent returns the nodes that ran the job's latest runs, latest first.
func (r runRecord) recent() []string {
	if len(r.Recent) == 0 && r.Node != "" {
		return []string{r.Node}
	}
	return r.Recent
}

// withRecent returns the list of recent nodes after node runs the job:
// node first, then the earlier ones without it, at most maxRecent.
func withRecent(node string, before []string) []string {
	out := make([]string, 0, min(len(before)+1, maxRecent))
	out = append(out, node)
	for _, n := range before {
		if len(out) == maxRecent {
			break
		}
		if n != node {
			out = append(out, n)
		}
	}
	return out
}

// maxSpreadDelay caps how long the node that ran a job's last tick waits
// before claiming the next (WithSpread).
const maxSpreadDelay = 250 * time.Millisecond

// spreadWait lets the nodes that ran the job least recently claim the tick
// first (WithSpread): it reads the job's record, which lists the nodes
// that ran its latest runs, and waits the longer the more recently this
// node ran it — not at all if it is not on the list, up to a tenth of the
// interval (at most maxSpreadDelay) if it ran the last tick. It returns
// the record it read (read false: none, or spreading is off). A record
// that cannot be read costs no wait.
func (j *job) spreadWait(ctx context.Context, planned time.Time, interval time.Duration) (last runRecord, read bool) {
	l := j.l
	if !l.cfg.spread || interval <= 0 {
		return runRecord{}, false
	}
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	last, err := l.lastRecord(rctx, j.name)
	cancel()
	if err != nil {
		return runRecord{}, false
	}
	if !last.Planned.Before(planned) {
		return last, true
	}
	d := spreadDelay(last.recent(), l.cfg.node, min(interval/10, maxSpreadDelay))
	if d <= 0 {
		return last, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return last, true
}

// spreadDelay is how long node waits before it claims a tick, given the
// nodes that ran the job last, latest first: nothing if node is not among
// them; else the longer the more recently it ran — budget for the node that
// ran the last tick, budget/n for the n-th and least recent one listed. So
// nodes claim in the order they ran the job least recently.
func spreadDelay(recent []string, node string, budget time.Duration) time.Duration {
	for i, n := range recent {
		if n == node {
			return budget * time.Duration(len(recent)-i) / time.Duration(len(recent))
		}
	}
	return 0
}
