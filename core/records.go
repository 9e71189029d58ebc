package core

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Records returns the Client's record store: short records kept beside the
// locks, on the same backend (Redis, Redlock or memory) and under the same
// key rule and prefix ("<prefix>:{<key>}:rec" on Redis). It is the
// capability adapters build on when a lease is not the right shape: cronlock
// keeps its one-shot tick claims and its run records here. A record is not
// a lease: it has no token, no fence and no renewal; it expires with its
// TTL. A backend provides it with the record methods of its interface.
func (c *Client) Records() *Records { return &Records{c} }

// Records is a Client's record store; see Client.Records. Its methods are
// safe for concurrent use. Keys follow the lock key rule (ErrInvalidKey);
// TTLs are at least a millisecond (ErrInvalidTTL); a backend failure is
// ErrUnavailable with the backend's error.
type Records struct{ c *Client }

// A ClaimVerdict is the answer of Records.ClaimWithin.
type ClaimVerdict uint8

// The verdicts of Records.ClaimWithin.
const (
	// Claimed: the claim is stored and ours.
	Claimed ClaimVerdict = iota + 1
	// ClaimTaken: the key already held a claim (on Redlock: no majority
	// claimed, and more nodes held a claim than found it late).
	ClaimTaken
	// ClaimLate: the key held nothing but the claim arrived after planned
	// + window by the store's clock; nothing was stored.
	ClaimLate
)

// String returns "claimed", "taken", "late" or "ClaimVerdict(n)".
func (v ClaimVerdict) String() string {
	switch v {
	case Claimed:
		return "claimed"
	case ClaimTaken:
		return "taken"
	case ClaimLate:
		return "late"
	}
	return "ClaimVerdict(" + strconv.Itoa(int(v)) + ")"
}

func (r *Records) check(key string) error {
	if r.c.caps&CapClaims == 0 {
		return unsupported("Records", CapClaims)
	}
	return validKey(key)
}

// Set stores value under key for ttl.
func (r *Records) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if err := r.check(key); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	return unavailable("set record", key, r.c.be.setRecord(ctx, r.c.names(key).lease+":rec", value, ttl))
}

// Get returns the value under key; ok is false when there is none.
func (r *Records) Get(ctx context.Context, key string) (string, bool, error) {
	if err := r.check(key); err != nil {
		return "", false, err
	}
	v, ok, err := r.c.be.getRecord(ctx, r.c.names(key).lease+":rec")
	return v, ok, unavailable("get record", key, err)
}

// Claim stores value under key for ttl only if key holds nothing, and
// reports whether it did: a one-shot claim that is never released, expires
// by itself, and carries no fence. On Redlock a claim needs a majority of
// nodes. On Redis a claim carries a random id, kept beside it for up to a
// minute ("<record>:c"): a claim that the go-redis client sends again
// after its answer was lost (MaxRetries) finds its own id and is still
// claimed, not taken. ClaimWithin does the same.
func (r *Records) Claim(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if err := r.check(key); err != nil {
		return false, err
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	ok, err := r.c.be.claimRecord(ctx, r.c.names(key).lease+":rec", value, ttl)
	return ok, unavailable("claim record", key, err)
}

// ClaimWithin is Claim for a claim that serves one instant, planned (a cron
// tick), and must be refused when it arrives too late. It returns
// ClaimTaken when key already holds a claim; otherwise ClaimLate, storing
// nothing, when the store's clock has passed planned + window; otherwise it
// stores value and returns Claimed. The clock is the store's, never the
// caller's: Redis TIME inside the claim script (on Redlock each node judges
// by its own TIME, and a claim needs a majority of nodes, as Claim does),
// the local clock in memory. (A store with no clock a write can be judged
// by — etcd, memcached — judges by the claimer's clock instead, read after
// the store answered, and keeps each claim a declared clock skew past
// planned + window: see those backends' documentation.)
//
// A claim lives for ttl or until planned + window by the store's clock,
// whichever ends later. So every claim of key that arrives by planned +
// window finds an earlier one, and every claim that arrives after it is
// refused: at most one claim of key ever succeeds, however long a claim was
// delayed on the way — as long as the store keeps its data and its clock
// does not go back. Planned and window are taken to the millisecond; a
// negative window is ErrInvalidTTL.
func (r *Records) ClaimWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (ClaimVerdict, error) {
	if err := r.check(key); err != nil {
		return 0, err
	}
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	if window < 0 {
		return 0, fmt.Errorf("%w: negative claim window %v", ErrInvalidTTL, window)
	}
	v, err := r.c.be.claimRecordWithin(ctx, r.c.names(key).lease+":rec", value, ttl, planned.UnixMilli(), window.Milliseconds())
	return v, unavailable("claim record", key, err)
}

// SetIfNewer stores value under key for ttl, like Set, unless key holds a
// record stored by SetIfNewer with a greater order (a later tick's planned
// time, say); it reports whether it stored. The order is kept in a sibling
// key ("<record>:ord"; same hash tag, same TTL) and compared and written
// with the record in one atomic step. Equal orders replace each other; a
// record stored by Set counts as older than any order; orders compare
// exactly within ±2^53. On Redlock each node decides for itself, and
// stored is true when a majority stored. Do not mix Set and SetIfNewer on
// one key.
func (r *Records) SetIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error) {
	if err := r.check(key); err != nil {
		return false, err
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	rec := r.c.names(key).lease + ":rec"
	ok, err := r.c.be.setRecordNewer(ctx, rec, rec+":ord", value, order, ttl)
	return ok, unavailable("set record", key, err)
}

// Scan lists the keys of the records stored under the Client's prefix
// whose key begins with prefix ("": every record) — for operator tools
// (cronlock's LastRuns lists its jobs this way). Keys come as the backend
// finds them (SCAN on every master of a Cluster; on Redlock every node,
// each key once), so memory stays flat however many there are; a record
// stored or expiring while the scan runs may come or not, and a key may
// be gone by the time it is read. Claims (Claim, ClaimWithin) are records
// too. A backend failure is yielded as an ErrUnavailable error and ends
// the scan.
func (r *Records) Scan(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		sc, ok := r.c.be.(scanner)
		if !ok || r.c.caps&(CapList|CapClaims) != CapList|CapClaims {
			yield("", unsupported("listing records", CapList|CapClaims))
			return
		}
		var seen map[string]bool // Redlock: a record is on several nodes
		if _, redlock := r.c.be.(*redlockBackend); redlock {
			seen = map[string]bool{}
		}
		head := r.c.cfg.prefix + ":{"
		err := sc.scanNames(ctx, globEscape(head+prefix)+"*}:rec", func(name string) bool {
			key, ok := strings.CutPrefix(name, head)
			if !ok {
				return true
			}
			if key, ok = strings.CutSuffix(key, "}:rec"); !ok || !strings.HasPrefix(key, prefix) || validKey(key) != nil {
				return true
			}
			if seen != nil {
				if seen[key] {
					return true
				}
				seen[key] = true
			}
			return yield(key, nil)
		})
		if err != nil {
			yield("", fmt.Errorf("%w: scan records: %w", ErrUnavailable, err))
		}
	}
}

// claimLife is how long a claim made at nowMs (unix ms) for ttl with the
// deadline dlMs must live: ttl, or until just past the deadline, whichever
// ends later — so no claim that arrives by the deadline finds the key
// expired. The memory backend uses it; claim_within.lua does the same.
func claimLife(nowMs, dlMs int64, ttl time.Duration) time.Duration {
	return max(ttl, time.Duration(dlMs-nowMs+1)*time.Millisecond)
}

// verdict names ClaimVerdict for the backends.
type verdict = ClaimVerdict

// The verdicts of claimRecordWithin.
const (
	verdictClaimed = Claimed
	verdictTaken   = ClaimTaken
	verdictLate    = ClaimLate
)

// unavailable wraps a backend failure of a record operation.
func unavailable(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, key, err)
}
