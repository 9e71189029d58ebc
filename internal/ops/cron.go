package ops

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/cronlock"
)

// A CronRun is the last run of a cronlock job (cronlock.Run), for tables
// and JSON.
type CronRun struct {
	Job        string    `json:"job"`
	Node       string    `json:"node"`
	Planned    time.Time `json:"planned"`     // the tick it served
	Start      time.Time `json:"start"`       // by the running node's clock
	DurationMs int64     `json:"duration_ms"` // 0 while running
	Running    bool      `json:"running"`
	Error      string    `json:"error,omitempty"`
	Fence      int64     `json:"fence,omitempty"`
}

func cronRun(r cronlock.Run) CronRun {
	return CronRun{Job: r.Name, Node: r.Node, Planned: r.Planned, Start: r.Start,
		DurationMs: r.Duration.Milliseconds(), Running: r.Running, Error: r.Error, Fence: r.Fence}
}

// CronRuns yields the last run of job, or of every job when job is ""
// (cronlock.Locker.LastRuns: as the records are found, memory flat). A
// job without a recorded run is an error matching ErrNotFound; an invalid
// job name matches cronlock.ErrInvalidName; a backend failure matches
// core.ErrUnavailable.
func CronRuns(ctx context.Context, c *core.Client, job string) iter.Seq2[CronRun, error] {
	return func(yield func(CronRun, error) bool) {
		l, err := cronlock.New(c)
		if err != nil {
			yield(CronRun{}, err)
			return
		}
		if job != "" {
			r, err := l.LastRun(ctx, job)
			if errors.Is(err, cronlock.ErrNoRun) {
				err = fmt.Errorf("%w: job %q has no recorded run (it never ran, or not in the last 30 days)", ErrNotFound, job)
			}
			yield(cronRun(r), err)
			return
		}
		for r, err := range l.LastRuns(ctx) {
			if !yield(cronRun(r), err) || err != nil {
				return
			}
		}
	}
}
