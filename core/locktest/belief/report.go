package belief

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// A Report is what a run did and what its referees found.
type Report struct {
	Seed     uint64
	Duration time.Duration
	// Attempts counts the Lock calls (those the run's end cut short
	// aside); Acquired those that returned a lock; Beliefs the beliefs
	// recorded (one per acquisition); Lost those that ended by a loss.
	Attempts, Acquired, Beliefs, Lost int
	// Faults counts the faults made, by Fault.Name.
	Faults map[string]int
	// Errors counts the errors the workers met, by operation and cause
	// ("lock: not acquired", "extend: backend unavailable").
	Errors map[string]int
	// WorstOverlap is the longest time a belief went on after the next
	// one on its key began (negative: every belief ended before the next
	// began, by at least that much).
	WorstOverlap time.Duration
	// Violations are the broken promises the referees found.
	Violations []Violation
	// Harness lists failures of the harness rather than of the lock: a
	// fault that could not be made, an Observer that was not installed.
	Harness []string

	minAcquired int
	faultKinds  int
	outages     int // attempts that ended ErrUnavailable: the store was out of reach
}

// A Violation is one broken promise.
type Violation struct {
	Referee string // "overlap" or "fence"
	Key     string
	Detail  string
}

func (v Violation) String() string { return v.Referee + ": key " + v.Key + ": " + v.Detail }

// Err is nil if the run passed: no violation, no harness failure, and
// enough done to judge — at least MinAcquired acquisitions, at least one
// attempt in ten acquired (not counting attempts that found the store out
// of reach: an outage's retries say nothing of the lock), and a fault made
// if faults were given.
func (r *Report) Err() error {
	var errs []error
	if n := len(r.Violations); n > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%d violations of the lock's promise:", n)
		for _, v := range r.Violations[:min(n, 10)] {
			b.WriteString("\n\t" + v.String())
		}
		errs = append(errs, errors.New(b.String()))
	}
	for _, h := range r.Harness {
		errs = append(errs, errors.New("harness: "+h))
	}
	if r.Acquired < r.minAcquired || r.Acquired*10 < r.Attempts-r.outages {
		errs = append(errs, fmt.Errorf("the run did too little to judge: %d acquisitions in %d attempts, %d of them in an outage (want at least %d, and one in ten of those outside outages)",
			r.Acquired, r.Attempts, r.outages, r.minAcquired))
	}
	if r.faultKinds > 0 && len(r.Faults) == 0 {
		errs = append(errs, errors.New("the run was given faults and made none: make the run longer or FaultEvery shorter"))
	}
	return errors.Join(errs...)
}

// String summarizes the run on one line.
func (r *Report) String() string {
	return fmt.Sprintf("seed %d, %v: %d beliefs (%d lost), %d acquisitions in %d attempts, faults {%s}, errors {%s}, worst overlap %v, %d violations",
		r.Seed, r.Duration, r.Beliefs, r.Lost, r.Acquired, r.Attempts, counts(r.Faults), counts(r.Errors), r.WorstOverlap, len(r.Violations))
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// judge runs the referees over the run's beliefs.
func (r *run) judge() *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{
		Seed: r.cfg.Seed, Duration: r.cfg.Duration,
		Attempts: r.attempts, Acquired: r.acquired, Beliefs: len(r.beliefs),
		Faults: maps.Clone(r.faults), Errors: maps.Clone(r.errs), Harness: slices.Clone(r.harm),
		WorstOverlap: -1 << 62, minAcquired: r.cfg.MinAcquired, outages: r.outages, faultKinds: len(r.cfg.Faults),
	}
	byKey := map[string][]record{}
	for _, b := range r.beliefs {
		if b.lost {
			rep.Lost++
		}
		byKey[b.key] = append(byKey[b.key], b)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		bs := byKey[key]
		slices.SortFunc(bs, func(a, b record) int { return cmp.Compare(a.from, b.from) })
		r.overlaps(rep, key, bs)
		r.fences(rep, key, bs)
	}
	if len(r.beliefs) < 2 {
		rep.WorstOverlap = 0
	}
	return rep
}

// overlaps: each belief (bs sorted by start) ends before every later one
// on its key begins, up to its drift margin plus the slack.
func (r *run) overlaps(rep *Report, key string, bs []record) {
	for j := 1; j < len(bs); j++ {
		b := bs[j]
		for _, a := range bs[:j] {
			over := a.to - b.from
			rep.WorstOverlap = max(rep.WorstOverlap, over)
			if allow := r.cfg.Margin(a.ttl) + r.cfg.Slack; over > allow {
				rep.Violations = append(rep.Violations, Violation{Referee: "overlap", Key: key, Detail: fmt.Sprintf(
					"Client %d (fence %d, ttl %v, %s) believed it held the key %v after Client %d (fence %d) took it (allowed %v)",
					a.client, a.fence, a.ttl, a.how(), over.Round(time.Microsecond), b.client, b.fence, allow)})
			}
		}
	}
}

// fences: fences rise strictly in the order the beliefs began, leaving
// out beliefs lost within the slack of Lock's return.
func (r *run) fences(rep *Report, key string, bs []record) {
	var prev *record
	for i := range bs {
		b := &bs[i]
		if b.lost && b.to-b.from <= r.cfg.Slack {
			continue
		}
		if prev != nil && b.fence <= prev.fence {
			rep.Violations = append(rep.Violations, Violation{Referee: "fence", Key: key, Detail: fmt.Sprintf(
				"Client %d got fence %d at %v, not above fence %d that Client %d got at %v",
				b.client, b.fence, b.from.Round(time.Microsecond), prev.fence, prev.client, prev.from.Round(time.Microsecond))})
		}
		prev = b
	}
}

func (b record) how() string {
	if b.lost {
		return "lost"
	}
	return "released"
}
