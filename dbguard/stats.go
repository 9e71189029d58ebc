package dbguard

import (
	"errors"
	"sync/atomic"
)

// Stats count what a Guard did since New. Read them with Guard.Stats; they
// are updated atomically, so a snapshot taken during deductions may mix
// counts from slightly different instants.
type Stats struct {
	// Deductions counts successful Deduct and DeductMany calls, and Units
	// the units they took (over all SKUs).
	Deductions, Units int64
	// Locked, Optimistic, RowLock and Atomic count successful calls by
	// the path that made them (under Auto: Locked, Optimistic, and Atomic
	// for a fallback that lost every optimistic race).
	Locked, Optimistic, RowLock, Atomic int64
	// Insufficient counts calls refused with ErrInsufficientStock, Unknown
	// those refused with ErrUnknownSKU, Busy those that gave up with
	// ErrBusy, and Failed those that ended with any other error but
	// ErrOutcomeUnknown (nothing was deducted by any of them).
	Insufficient, Unknown, Busy, Failed int64
	// OutcomeUnknown counts calls that ended with ErrOutcomeUnknown: the
	// answer to the write was lost and the units may or may not have been
	// taken. They are not in Failed, nor in Deductions and Units.
	OutcomeUnknown int64
	// Settled counts Locked writes whose answer was lost (the connection
	// broke, the context ended) and whose outcome the row's fence then
	// settled: each is also counted as the success or the failure it
	// turned out to be.
	Settled int64
	// Conflicts counts optimistic writes that found the version moved (or
	// were aborted by the database) and were retried or gave up.
	Conflicts int64
	// StaleFences counts fenced writes the row rejected (ErrStaleFence).
	StaleFences int64
	// TxRetries counts statements and transactions the database aborted
	// as a whole — deadlock victim, serialization failure, lock wait
	// timeout, SQLite busy — and that were run again.
	TxRetries int64
	// Fallbacks counts Auto deductions made optimistically because the
	// lock was unavailable, slow, contended or fenced out; LockOutages
	// counts the times Auto found the lock service failing and stopped
	// using it for WithProbeInterval.
	Fallbacks, LockOutages int64
}

type counters struct {
	deductions, units                 atomic.Int64
	locked, optimistic, rowLock, atom atomic.Int64
	insufficient, unknown, busy, fail atomic.Int64
	outcomeUnknown, settled           atomic.Int64
	conflicts, staleFences, txRetries atomic.Int64
	fallbacks, outages                atomic.Int64
}

// Stats returns the Guard's counters.
func (g *Guard) Stats() Stats {
	c := &g.stats
	return Stats{
		Deductions: c.deductions.Load(), Units: c.units.Load(),
		Locked: c.locked.Load(), Optimistic: c.optimistic.Load(), RowLock: c.rowLock.Load(), Atomic: c.atom.Load(),
		Insufficient: c.insufficient.Load(), Unknown: c.unknown.Load(), Busy: c.busy.Load(), Failed: c.fail.Load(),
		OutcomeUnknown: c.outcomeUnknown.Load(), Settled: c.settled.Load(),
		Conflicts: c.conflicts.Load(), StaleFences: c.staleFences.Load(), TxRetries: c.txRetries.Load(),
		Fallbacks: c.fallbacks.Load(), LockOutages: c.outages.Load(),
	}
}

// record counts the outcome of one call that ran via strategy s.
func (c *counters) record(s Strategy, items []item, err error) {
	switch {
	case err == nil:
		c.deductions.Add(1)
		var units int64
		for _, it := range items {
			units += it.qty
		}
		c.units.Add(units)
		switch s {
		case Locked:
			c.locked.Add(1)
		case Optimistic:
			c.optimistic.Add(1)
		case RowLock:
			c.rowLock.Add(1)
		case Atomic:
			c.atom.Add(1)
		}
	case errors.Is(err, ErrOutcomeUnknown):
		c.outcomeUnknown.Add(1)
	case errors.Is(err, ErrInsufficientStock):
		c.insufficient.Add(1)
	case errors.Is(err, ErrUnknownSKU):
		c.unknown.Add(1)
	case errors.Is(err, ErrBusy):
		c.busy.Add(1)
	default:
		c.fail.Add(1)
	}
}
