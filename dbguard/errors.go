package dbguard

import (
	"errors"
	"fmt"

	"github.com/latchkey/latchkey/core"
)

// Errors returned by this package. Match them with errors.Is: each is
// wrapped with the SKU or key concerned and, where there is one, the cause
// (a database error, a Redis error, context.DeadlineExceeded), so errors.Is
// finds both.
//
// ErrInsufficientStock and ErrUnknownSKU are answers about the stock;
// ErrBusy is contention that outlasted the configured bounds; a database or
// Redis failure is returned wrapped as itself (ErrUnavailable for the
// lock service under the Locked strategy), never disguised as one of them.
// Every error but ErrOutcomeUnknown means nothing was deducted.
var (
	// ErrInsufficientStock: the SKU has fewer units than asked for. Nothing
	// was deducted (for DeductMany: from any SKU of the order).
	ErrInsufficientStock = errors.New("dbguard: insufficient stock")

	// ErrUnknownSKU: no row for the SKU. Restock creates it.
	ErrUnknownSKU = errors.New("dbguard: unknown sku")

	// ErrInvalidSKU: the SKU is empty, longer than MaxSKULen bytes, not
	// valid UTF-8 or contains a control character.
	ErrInvalidSKU = errors.New("dbguard: invalid sku")

	// ErrInvalidQty: a quantity of zero or less, or an order with no items.
	ErrInvalidQty = errors.New("dbguard: invalid quantity")

	// ErrQtyOverflow: a Restock that would take the SKU's stock past
	// math.MaxInt64 units. Nothing was added. It wraps ErrInvalidQty, so
	// errors.Is finds both.
	ErrQtyOverflow = fmt.Errorf("%w: stock would overflow int64", ErrInvalidQty)

	// ErrOutcomeUnknown: the statement that takes the units (or the COMMIT
	// of an order's transaction) was sent and its answer was lost — the
	// connection was killed, reset or closed under it, or the context
	// ended while it was in flight — and the row could not tell either: the
	// units may or may not have been taken. The driver's error is wrapped,
	// so errors.Is finds both (io.ErrUnexpectedEOF, context.Canceled, ...).
	// Locked deductions settle such an answer from the row's fence, and
	// return this only when that read fails too; the other strategies have
	// nothing to read it from. Do not retry blindly: look the order up by
	// its own key first (see the package documentation, "When the answer
	// is lost"). An error before the statement was sent is never this one.
	// Versioned.Put returns it too, for a put whose answer was lost.
	ErrOutcomeUnknown = errors.New("dbguard: outcome unknown")

	// ErrNilDB: New or VersionsInSQL was given a nil *sql.DB.
	ErrNilDB = errors.New("dbguard: nil database")

	// ErrInvalidOption: an option that cannot work — a malformed table or
	// column name, an unknown strategy or dialect, a duration or retry
	// count below 1, Locked without WithLocks, or a driver whose dialect
	// cannot be detected (use WithDialect) — or a nil VersionStore, Redis
	// client or update func. Every call of a Guard (or Versioned) made with
	// such an option returns it.
	ErrInvalidOption = errors.New("dbguard: invalid option")

	// ErrBusy: the deduction gave up because of other buyers: the SKU lock
	// was not free within WithWaitTimeout (Locked), or the row's version
	// kept moving through WithRetryBudget attempts (Optimistic, and
	// Versioned.Update; the error then also matches ErrVersionConflict).
	// Nothing was deducted; the call may be retried. Auto never returns it.
	// It matches core.ErrNotAcquired too: contention, in this module's
	// vocabulary.
	ErrBusy error = matching{"dbguard: busy", core.ErrNotAcquired}

	// ErrUnavailable: under the Locked strategy, the lock service
	// (Redis) failed or did not answer within WithWaitTimeout. The cause is
	// wrapped. Nothing was deducted. Auto never returns it: it deducts
	// optimistically instead.
	ErrUnavailable error = matching{"dbguard: lock service unavailable", core.ErrUnavailable}

	// ErrStaleFence: a fenced write carried a fence no higher than the one
	// the row already holds: the writer's lease had expired (it paused past
	// its TTL) and a later holder has written since. The write was
	// rejected. Deduct retries with a fresh lock, so callers see it only
	// when that keeps happening through WithRetryBudget attempts.
	ErrStaleFence = errors.New("dbguard: stale fence")

	// ErrVersionConflict: a versioned write found that the version it was
	// based on had moved (Versioned.Put), or, wrapped in ErrBusy, an
	// optimistic deduction lost every attempt to concurrent writers.
	ErrVersionConflict = errors.New("dbguard: version conflict")

	// ErrNotFound: Versioned.Get found no value for the key.
	ErrNotFound = errors.New("dbguard: not found")

	// ErrInvalidKey: a Versioned key that is empty, longer than MaxSKULen
	// bytes, not valid UTF-8 or contains a control character.
	ErrInvalidKey = errors.New("dbguard: invalid key")

	// ErrInvalidVersion: a version given to Versioned.Put that is negative
	// or math.MaxInt64 (the stored version could not grow past it), or a
	// stored version that is not a decimal int64 (one written by an older
	// VersionsInRedis script, which formatted versions from 1e14 up as
	// doubles: "1e+14").
	ErrInvalidVersion = errors.New("dbguard: invalid version")

	// ErrIncompatibleTable: Migrate (Guard's or Versioned's) found an
	// existing MySQL or MariaDB table whose key column (the SKU, the
	// Versioned id) does not compare byte for byte — a VARCHAR with a
	// case-insensitive or PAD SPACE collation, as the tables this package
	// created before it used VARBINARY — so "SKU-A", "sku-a" and "SKU-A "
	// would be one row under three locks and three fences. Migrate does
	// not alter the table: the error gives the ALTER TABLE statement to
	// run.
	ErrIncompatibleTable = errors.New("dbguard: incompatible table")
)

// matching is a sentinel that also matches a core sentinel with errors.Is,
// so that one vocabulary holds across packages (contention is
// core.ErrNotAcquired, an outage core.ErrUnavailable, wherever they come
// from).
type matching struct {
	text string
	also error
}

func (e matching) Error() string { return e.text }

// Is reports whether target is the core sentinel this one stands for.
func (e matching) Is(target error) bool { return target == e.also }
