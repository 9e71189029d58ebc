package main

import (
	"context"
	"fmt"

	"github.com/latchkey/latchkey/internal/ops"
)

// runCron shows the last run of every job, or of one.
func runCron(ctx context.Context, e *env, args []string) error {
	job := ""
	if len(args) == 1 {
		job = args[0]
	}
	c, err := e.locks()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var list *jsonList
	var t *table
	switch {
	case e.json && job == "":
		list = newJSONList(e.stdout)
		defer list.close()
	case !e.json:
		t = newTable(e.stdout,
			column{name: "JOB", width: 10, flex: 2},
			column{name: "NODE", width: 12},
			column{name: "PLANNED", width: 20},
			column{name: "START", width: 20},
			column{name: "DURATION", width: 8, right: true},
			column{name: "FENCE", width: 16, right: true},
			column{name: "RESULT", width: 8, flex: 2},
		)
	}
	n := 0
	for r, err := range ops.CronRuns(ctx, c, job) {
		if err != nil {
			return err
		}
		n++
		switch {
		case e.json && job != "":
			return writeJSON(e.stdout, r)
		case e.json:
			if err := list.add(r); err != nil {
				return err
			}
		default:
			result, took := "ok", dur(msDuration(r.DurationMs))
			switch {
			case r.Running:
				result, took = "running", "-"
			case r.Error != "":
				result = "error: " + r.Error
			}
			t.row(r.Job, r.Node, stamp(r.Planned), stamp(r.Start), took, fmt.Sprint(r.Fence), result)
		}
	}
	if n == 0 && !e.json {
		fmt.Fprintf(e.stderr, "no cronlock job has a recorded run under prefix %q\n", e.prefix)
	}
	return nil
}
