package core

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// processor runs one command: a go-redis client, or a coalescer in front
// of one.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// coalesceLanes is how many commands or pipelines a coalescer lets run at
// once. Three did best in bench's parallel scenario (16 goroutines on two
// cores, bench/results/coalesce-ab-20261128.md): one lane serialises the
// calls, more make smaller pipelines.
const coalesceLanes = 3

// A coalescer sends the hot path's commands (acquisitions and releases)
// that callers issue at the same time in one pipeline: one write and one
// read for all of them, on the client and on the server, where each
// would pay its own. It serves a single server or a Sentinel group (a
// *redis.Client), not a Cluster.
//
// A caller that finds a lane free (fewer than lanes commands or pipelines
// in flight) sends its command at once, exactly as without the coalescer:
// a lone caller waits for nobody, and adds one uncontended mutex. The
// others queue. When a lane frees, the first of the queue takes the whole
// queue and sends it as one pipeline, answers the others, and passes the
// lane on the same way. A queued caller whose ctx ends before its command
// was taken leaves the queue, its command never sent (an unsentError; a
// release then goes out on its own all the same); once taken, it waits
// for the answer, so that it can tell what the command did (a pipeline
// is bounded by the latest deadline among its callers, or unbounded when
// they have none: see send).
//
// What a caller measures from before its call (a lease's start) includes
// its time in the queue, so deadlines reckoned from it stay conservative.
type coalescer struct {
	rdb   *redis.Client
	lanes int

	mu    sync.Mutex
	busy  int // lanes in use
	queue []*queued
}

// queued is a command waiting for a lane. turn receives, once, the batch
// to send when the receiver leads it (its first element is the receiver),
// or nil once another caller's pipeline has answered its command.
type queued struct {
	ctx  context.Context
	cmd  redis.Cmder
	turn chan []*queued
}

var queuedPool = sync.Pool{New: func() any { return &queued{turn: make(chan []*queued, 1)} }}

func (c *coalescer) Process(ctx context.Context, cmd redis.Cmder) error {
	c.mu.Lock()
	if c.busy < c.lanes {
		c.busy++
		c.mu.Unlock()
		defer c.pass() // even if a hook panics: the lane is not lost
		return c.rdb.Process(ctx, cmd)
	}
	q := queuedPool.Get().(*queued)
	q.ctx, q.cmd = ctx, cmd
	c.queue = append(c.queue, q)
	c.mu.Unlock()
	var batch []*queued
	select {
	case batch = <-q.turn:
	case <-ctx.Done():
		c.mu.Lock()
		i := slices.Index(c.queue, q)
		if i >= 0 { // not taken: it was never sent
			c.queue = slices.Delete(c.queue, i, i+1)
		}
		c.mu.Unlock()
		if i >= 0 {
			q.ctx, q.cmd = nil, nil
			queuedPool.Put(q)
			cmd.SetErr(unsentError{context.Cause(ctx)})
			return cmd.Err()
		}
		batch = <-q.turn // taken: it is sent, or about to be
	}
	if batch != nil {
		c.send(batch)
	}
	q.ctx, q.cmd = nil, nil
	queuedPool.Put(q)
	return cmd.Err()
}

// unsentError is the error of a command that left a coalescer's queue
// unsent, its caller's ctx ended: it wraps the ctx's cause. What must
// reach the server all the same (a release) goes out on its own then
// (redisBackend.releaseNonce).
type unsentError struct{ cause error }

func (e unsentError) Error() string {
	return "not sent, every connection busy: " + e.cause.Error()
}

func (e unsentError) Unwrap() error { return e.cause }

// unsent reports whether err is a command's that was never sent.
func unsent(err error) bool {
	if err == nil {
		return false // before errors.As, whose target escapes: no allocation
	}
	var u unsentError
	return errors.As(err, &u)
}

// send runs batch, passes the lane on, and answers the batch's followers.
// If a hook of the client panics, the followers not yet answered get
// errPanicked (their commands may have run, as after a broken
// connection), the lane passes on, and the panic goes on up the leader's
// call.
//
// A command whose caller's ctx ended before it went out is not sent (an
// unsentError, so that a release goes out on its own). The commands of
// callers with a deadline go out as one pipeline, bounded by the latest of
// their deadlines, but by no less than sendGrace, so that a command taken
// is written, never failed before it was (which would leave it neither
// sent nor unsent). The commands of callers without a deadline go out
// after them, as a pipeline of their own, unbounded: neither kind of caller
// bounds or unbounds the other's wait. That second pipeline is sent by the
// leader when it has no deadline itself; else by the first of its callers,
// to which the lane passes with it, so that the leader returns in time.
func (c *coalescer) send(batch []*queued) {
	lead := batch[0]
	rest := batch[1:] // followers not answered yet
	laneHeld, finished := true, false
	defer func() {
		if finished {
			return
		}
		for _, q := range rest {
			if !unsent(q.cmd.Err()) {
				q.cmd.SetErr(errPanicked)
			}
		}
		if laneHeld {
			c.pass()
		}
		for _, q := range rest {
			q.turn <- nil
		}
	}()
	var bounded, unbounded []*queued
	var latest time.Time
	for _, q := range batch {
		if q.ctx.Err() != nil {
			q.cmd.SetErr(unsentError{context.Cause(q.ctx)})
			continue
		}
		if d, ok := q.ctx.Deadline(); ok {
			bounded = append(bounded, q)
			latest = later(latest, d)
		} else {
			unbounded = append(unbounded, q)
		}
	}
	if len(bounded) > 0 {
		c.run(lead.ctx, bounded, later(latest, time.Now().Add(sendGrace)))
	}
	if len(unbounded) == 0 {
		laneHeld = false
		c.pass()
		for _, q := range rest { // the next batch first: its callers waited longest
			q.turn <- nil
		}
		finished = true
		return
	}
	// Answer the callers done with; the others wait for the second
	// pipeline (both lists are in batch order).
	waiting := unbounded
	if waiting[0] == lead {
		waiting = waiting[1:]
	}
	k := 0
	for _, q := range rest {
		if k < len(waiting) && q == waiting[k] {
			k++
			continue
		}
		q.turn <- nil
	}
	rest = waiting
	if unbounded[0] != lead {
		finished = true // the lane and the callers go with the group
		unbounded[0].turn <- unbounded
		return
	}
	c.run(lead.ctx, unbounded, time.Time{})
	laneHeld = false
	c.pass()
	for _, q := range rest {
		q.turn <- nil
	}
	finished = true
}

// run sends the commands of qs, one pipeline for several, with the values
// of vals (a trace), bounded by deadline unless it is zero.
func (c *coalescer) run(vals context.Context, qs []*queued, deadline time.Time) {
	ctx := context.WithoutCancel(vals)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if len(qs) == 1 {
		_ = c.rdb.Process(ctx, qs[0].cmd)
		return
	}
	pipe := c.rdb.Pipeline()
	for _, q := range qs {
		_ = pipe.Process(ctx, q.cmd)
	}
	_, _ = pipe.Exec(ctx)
}

// sendGrace is the least time a coalesced command is given to be sent
// and answered (see send).
const sendGrace = 20 * time.Millisecond

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// errPanicked answers the commands of a pipeline that a hook of the
// go-redis client panicked in, on another caller's goroutine.
var errPanicked = errors.New("core: a go-redis hook panicked while the pipeline carrying this command ran")

// pass hands the caller's lane, with the whole queue, to the queue's
// first, or frees it.
func (c *coalescer) pass() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.busy--
		c.mu.Unlock()
		return
	}
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	batch[0].turn <- batch
}
