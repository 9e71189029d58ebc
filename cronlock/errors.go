package cronlock

import "errors"

// Errors returned by this package. Match them with errors.Is: errors that
// have a cause (a parser error, a Redis error) wrap both the sentinel and the
// cause.
//
// A job's own failures are not returned to anyone — cron.Job.Run has no
// result — they are logged through the cron.Logger and kept in the record
// that LastRun reads.
var (
	// ErrInvalidName: a job name that is empty, longer than MaxNameLen
	// bytes, not valid UTF-8, or contains a control character.
	ErrInvalidName = errors.New("cronlock: invalid job name")

	// ErrInvalidSchedule: a spec the parser rejects, a nil schedule, or a
	// schedule that has no fire time to plan from.
	ErrInvalidSchedule = errors.New("cronlock: invalid schedule")

	// ErrInvalidOption: an option value that cannot work (a negative hold,
	// a lease TTL under one millisecond, a malformed node ID, an unknown
	// overlap policy, MissedRunAll below 1 or a negative max age), a nil
	// func, or a nil *cron.Cron.
	ErrInvalidOption = errors.New("cronlock: invalid option")

	// ErrNilClient: New was given a nil *core.Client.
	ErrNilClient = errors.New("cronlock: nil core client")

	// ErrNoRun: LastRun found no record of the job (it never ran, or its
	// record expired).
	ErrNoRun = errors.New("cronlock: no run recorded")

	// ErrMaxHold: the cause (context.Cause) of a job context cancelled
	// because the run reached WithMaxHold.
	ErrMaxHold = errors.New("cronlock: max hold reached")

	// ErrClosed: Locker.Close ended leader mode (WithLeader). It is the
	// cause, with core.ErrLost, of a job context cancelled by Close, and
	// the error of a tick skipped after it (SkipClosed).
	ErrClosed = errors.New("cronlock: locker closed")

	// ErrPanic: the job panicked. The recorded error wraps it with the
	// panic value; the stack goes to the logger.
	ErrPanic = errors.New("cronlock: job panicked")
)
