package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/core"
	"github.com/latchkey/latchkey/internal/ops"
)

func locksFlags(e *env) {
	e.fs.StringVar(&e.match, "match", "", "only keys matching `GLOB` (path.Match: * ? [a-z]; * alone: every key)")
}

func releaseFlags(e *env) {
	e.fs.BoolVar(&e.force, "force", false, "required: take the key away from its live holders")
	e.fs.BoolVar(&e.yes, "yes", false, "do not ask for confirmation")
}

// holdColumns are the columns of a table of holds.
func holdTable(e *env) *table {
	return newTable(e.stdout,
		column{name: "KEY", width: 12, flex: 3},
		column{name: "KIND", width: 6},
		column{name: "HOLDER", width: 10},
		column{name: "FENCE", width: 16, right: true},
		column{name: "TTL", width: 7, right: true},
		column{name: "WAITERS", width: 12, right: true},
		column{name: "METADATA", width: 8, flex: 2},
	)
}

func holdRow(t *table, key string, h ops.Hold, waiters int, oldestMs int64) {
	t.row(key, string(h.Kind), h.Holder, strconv.FormatInt(h.Fence, 10), ttl(h.TTLMs), waitersCell(waiters, oldestMs), h.Metadata)
}

// waitersCell is a count of queued waiters and, when there are any, how
// long the first has waited: "3 (1.2s)".
func waitersCell(n int, oldestMs int64) string {
	if n == 0 {
		return "0"
	}
	return strconv.Itoa(n) + " (" + dur(time.Duration(oldestMs)*time.Millisecond) + ")"
}

// runLocks lists the held primitives as core's Scan finds them: one table
// row per hold, or one JSON object per primitive.
func runLocks(ctx context.Context, e *env, _ []string) error {
	c, err := e.locks()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var list *jsonList
	var t *table
	if e.json {
		list = newJSONList(e.stdout)
		defer list.close()
	} else {
		t = holdTable(e)
	}
	n := 0
	for p, err := range ops.Locks(ctx, c, e.match) {
		if err != nil {
			if errors.Is(err, core.ErrInvalidOption) {
				return usagef("--match %q: %v", e.match, err)
			}
			return err
		}
		n++
		if e.json {
			if err := list.add(p); err != nil {
				return err
			}
			continue
		}
		for _, h := range p.Holds {
			holdRow(t, p.Key, h, p.Waiters, p.OldestWaitMs)
		}
	}
	if n == 0 && !e.json {
		fmt.Fprintf(e.stderr, "nothing held under prefix %q%s\n", e.prefix, matching(e.match))
	}
	return nil
}

func matching(m string) string {
	if m == "" {
		return ""
	}
	return fmt.Sprintf(" matching %q", m)
}

// runInspect shows one key; exit 3 when nothing holds it.
func runInspect(ctx context.Context, e *env, args []string) error {
	c, err := e.locks()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	k, err := ops.Inspect(ctx, c, args[0])
	if err != nil {
		return err
	}
	if e.json {
		if err := writeJSON(e.stdout, k); err != nil {
			return err
		}
	} else {
		printKey(e, k)
	}
	if !k.Held {
		return fmt.Errorf("%w: %q: nothing holds it", core.ErrNotHeld, k.Key)
	}
	return nil
}

func printKey(e *env, k ops.Key) {
	w := e.stdout
	fmt.Fprintf(w, "key       %s\n", printable(k.Key))
	switch {
	case k.Lock != nil:
		fmt.Fprintf(w, "lock      held by %s, fence %d, %s left\n", k.Lock.Token, k.Lock.Fence, ttl(k.Lock.TTLMs))
		if k.Lock.Metadata != "" {
			fmt.Fprintf(w, "          metadata %s\n", printable(k.Lock.Metadata))
		}
	case k.Fence > 0:
		fmt.Fprintf(w, "lock      free (last fence issued %d)\n", k.Fence)
	default:
		fmt.Fprintf(w, "lock      free\n")
	}
	fmt.Fprintf(w, "          %d waiter(s) in the fair queue%s\n", k.FairQueue, firstFor(k.FairQueueOldestMs))
	if len(k.Permits) > 0 || k.PermitQueue > 0 {
		fmt.Fprintf(w, "semaphore %d permit(s) held, %d waiter(s) queued%s\n", len(k.Permits), k.PermitQueue, firstFor(k.PermitQueueOldestMs))
	}
	if len(k.RW) > 0 || k.WritersWaiting > 0 {
		fmt.Fprintf(w, "rwmutex   %d hold(s), %d writer(s) waiting%s\n", len(k.RW), k.WritersWaiting, firstFor(k.WritersOldestMs))
	}
	if hs := k.Holds(); len(hs) > 0 {
		fmt.Fprintln(w)
		t := holdTable(e)
		for _, h := range hs {
			waiters, oldest := k.FairQueue, k.FairQueueOldestMs
			switch h.Kind {
			case core.KindPermit:
				waiters, oldest = k.PermitQueue, k.PermitQueueOldestMs
			case core.KindRead, core.KindWrite:
				waiters, oldest = k.WritersWaiting, k.WritersOldestMs
			}
			holdRow(t, k.Key, h, waiters, oldest)
		}
	}
}

// firstFor says how long a queue's first waiter has waited, if any does.
func firstFor(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return ", the first for " + dur(time.Duration(ms)*time.Millisecond)
}

// runRelease evicts every holder of a key, after a confirmation.
func runRelease(ctx context.Context, e *env, args []string) error {
	key := args[0]
	if !e.force {
		return usagef("release takes a key away from a live holder: say --force")
	}
	c, err := e.locks()
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	before, err := ops.Inspect(ictx, c, key) // also rejects an invalid key before any write
	if err != nil {
		return err
	}
	hs := before.Holds()
	if len(hs) == 0 {
		return fmt.Errorf("%w: %q: nothing holds it, nothing to release", core.ErrNotHeld, key)
	}
	if !e.yes {
		fmt.Fprintf(e.stderr, "%s is held by:\n", printable(key))
		for _, h := range hs {
			fmt.Fprintf(e.stderr, "  %-6s %s fence %d, %s left %s\n", h.Kind, h.Token, h.Fence, ttl(h.TTLMs), printable(h.Metadata))
		}
		fmt.Fprintln(e.stderr, "Force release deletes these holds and raises the fence: storage that checks fences rejects")
		fmt.Fprintln(e.stderr, "their late writes, and each holder is told (Lost) at its next renewal.")
		if err := e.confirm("Force release " + strconv.Quote(key) + "?"); err != nil {
			return err
		}
	}
	ctx, cancel = context.WithTimeout(ctx, e.timeout) // the time to answer is not the command's
	defer cancel()
	tokens := make([]string, 0, len(hs))
	for _, h := range hs {
		tokens = append(tokens, h.Token)
	}
	ev, err := ops.Evict(ctx, c, key, tokens...) // only the holders shown
	if err != nil {
		return err
	}
	if e.json {
		return writeJSON(e.stdout, ev)
	}
	fmt.Fprintf(e.stdout, "released %s: evicted %d hold(s)\n", printable(key), len(ev.Evicted))
	for _, h := range ev.Evicted {
		fmt.Fprintf(e.stdout, "  %-6s %s fence %d %s\n", h.Kind, h.Token, h.Fence, printable(h.Metadata))
	}
	if ev.Fence > 0 {
		fmt.Fprintf(e.stdout, "the lock's fence is now %d: writes fenced with a lower one are rejected\n", ev.Fence)
	} else {
		fmt.Fprintln(e.stdout, "the fences were raised: writes fenced with the evicted ones are rejected")
	}
	fmt.Fprintln(e.stdout, "each evicted holder is told (Lost) at its next renewal, within a third of its TTL")
	if changed(hs, ev.Evicted) {
		fmt.Fprintln(e.stderr, "note: some holders shown gave the key up before the release; the ones evicted are listed above")
	}
	return nil
}

// changed reports whether the holds evicted are not the ones confirmed.
func changed(confirmed, evicted []ops.Hold) bool {
	if len(confirmed) != len(evicted) {
		return true
	}
	seen := map[string]bool{}
	for _, h := range confirmed {
		seen[h.Token] = true
	}
	for _, h := range evicted {
		if !seen[h.Token] {
			return true
		}
	}
	return false
}
