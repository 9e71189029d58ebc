package dbguard

import "context"

// DeductFenced runs the fenced write of the Locked strategy for one SKU with
// the given fence, without taking the lock: what a holder does after its
// lock was granted, so a test can replay the write of a holder that paused
// past its lease.
func DeductFenced(ctx context.Context, g *Guard, sku string, qty, fence int64) error {
	return g.writeFenced(ctx, []item{{sku: sku, qty: qty}}, []int64{fence})
}

// LockKey returns the core lock key the Guard uses for sku.
func LockKey(g *Guard, sku string) string { return g.lockKey(sku) }

// SetBeforeFencedWrite installs a hook that runs after a Locked deduction
// holds its locks and before its fenced write. Call it before the Guard is
// used.
func SetBeforeFencedWrite(g *Guard, f func(ctx context.Context, sku string, fence int64)) {
	g.beforeFencedWrite = f
}

// MayHaveCommitted reports whether err, from a committing statement sent
// while its context was live (or not), leaves the commit in doubt.
func MayHaveCommitted(live bool, err error) bool { return mayHaveCommitted(live, err) }
