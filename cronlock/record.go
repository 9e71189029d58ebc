package cronlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"
)

// A Run describes one run of a job, as LastRun reads it. All nodes share
// the record: it lives on the same Redis as the locks.
type Run struct {
	// Name is the job's name.
	Name string `json:"name"`
	// Node is the node that ran it (WithNodeID).
	Node string `json:"node"`
	// Planned is the tick the run served: the schedule's fire time, the
	// same on every node.
	Planned time.Time `json:"planned"`
	// Start is when the job function was called, by the running node's
	// clock.
	Start time.Time `json:"start"`
	// Duration is how long the job function ran (0 while Running).
	Duration time.Duration `json:"duration"`
	// Error is the job's error text, "" on success. It also tells of a
	// panic (ErrPanic), a lost running lease (core.ErrLost) and the max
	// hold (ErrMaxHold).
	Error string `json:"error,omitempty"`
	// Running is true from the start of the run until its end is recorded.
	Running bool `json:"running,omitempty"`
	// Fence is the running lease's fencing token, strictly increasing per
	// job; 0 for a run without the lock (WithFailOpen while Redis was down).
	// In leader mode it is the leadership's fence, rising from term to
	// term (see Tick.Fence).
	Fence int64 `json:"fence,omitempty"`
	// CatchUp is true for a catch-up run: Planned was missed, and the run
	// came later (WithMissed; see Tick.CatchUp).
	CatchUp bool `json:"catch_up,omitempty"`
}

// runRecord is the stored form of a Run: the run, and the nodes that ran
// the job's latest runs, latest first — this run's node first — for
// WithSpread. A record written before Recent existed has none: its Node
// stands for the list.
type runRecord struct {
	Run
	Recent []string `json:"recent,omitempty"`
}

// lastRunRetention is how long a LastRun record is kept at least; a job
// that runs less often keeps its record three intervals.
const lastRunRetention = 30 * 24 * time.Hour

// LastRun returns the record of the job's latest run on any node: its
// start is written when the job function is called (Running true) and
// replaced by the outcome when it returns, before the running lease is
// released. A record is written only if no run of a later tick (by
// planned time) has recorded, so LastRun never goes back to an older tick
// — not even when a run that lost its lease ends after the next run began,
// or a catch-up run (WithMissed) of an older tick runs after a later tick
// did. It returns ErrNoRun when there is none (never ran, or not in the
// last 30 days or three intervals, whichever is longer).
func (l *Locker) LastRun(ctx context.Context, name string) (Run, error) {
	if err := validName(name); err != nil {
		return Run{}, err
	}
	r, err := l.lastRecord(ctx, name)
	return r.Run, err
}

// lastRecord reads the record of the job's latest run; see LastRun.
func (l *Locker) lastRecord(ctx context.Context, name string) (runRecord, error) {
	v, ok, err := l.store.Get(ctx, lastKey(name))
	if err != nil {
		return runRecord{}, fmt.Errorf("cronlock: last run of %q: %w", name, err)
	}
	if !ok {
		return runRecord{}, fmt.Errorf("%w: %q", ErrNoRun, name)
	}
	var r runRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return runRecord{}, fmt.Errorf("cronlock: last run of %q: malformed record: %w", name, err)
	}
	return r, nil
}

// LastRuns yields the LastRun record of every job that has one on the
// Client's backend under its key prefix — all the jobs the fleet runs,
// not only this Locker's — for operator tools (cmd/latchkey cron, the
// admin page). Jobs come in the order the records are found
// (core.Records.Scan), so memory stays flat however many there are; a
// record that expires while the scan runs is left out. A backend failure
// or a malformed record is yielded as an error (matching
// core.ErrUnavailable for a failure) and ends the listing.
func (l *Locker) LastRuns(ctx context.Context) iter.Seq2[Run, error] {
	return func(yield func(Run, error) bool) {
		for key, err := range l.store.Scan(ctx, "cron:") {
			if err != nil {
				yield(Run{}, fmt.Errorf("cronlock: last runs: %w", err))
				return
			}
			name, ok := strings.CutSuffix(strings.TrimPrefix(key, "cron:"), ":last")
			if !ok || validName(name) != nil {
				continue // a tick's claim, or not cronlock's
			}
			r, err := l.LastRun(ctx, name)
			if errors.Is(err, ErrNoRun) {
				continue
			}
			if !yield(r, err) || err != nil {
				return
			}
		}
	}
}

// record stores r as the job's last run, with recent as the nodes that
// ran it last, unless a later tick has recorded since: the record is
// ordered by r.Planned (unix ms), compared and written in one step on
// Redis, so the late end of a run that lost its lease can never replace
// the record of a newer run. It logs what went wrong and returns the error
// of a record that could not be written; a record refused because a later
// tick's is there is no error.
func (j *job) record(ctx context.Context, r Run, recent []string, interval time.Duration) error {
	b, err := json.Marshal(runRecord{Run: r, Recent: recent})
	if err != nil { // cannot happen: plain fields
		j.l.cfg.logger.Error(err, "cannot record run", "job", j.name)
		return err
	}
	ttl := lastRunRetention
	if 3*interval > ttl {
		ttl = 3 * interval
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	stored, err := j.l.store.SetIfNewer(ctx, j.lastKey, string(b), r.Planned.UnixMilli(), ttl)
	switch {
	case err != nil:
		j.l.cfg.logger.Error(err, "cannot record run", "job", j.name, "planned", r.Planned, "node", j.l.cfg.node)
	case !stored:
		j.l.cfg.logger.Info("run not recorded: a later tick has recorded", "job", j.name, "planned", r.Planned, "node", j.l.cfg.node)
	}
	return err
}
