package memcachelock

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/latchkey/latchkey/core"
)

// Records (core.CapClaims): one item per record, "<namespace><hash>:r",
// beside the lease (":l") and fence (":f") items of the same name, so a
// record never collides with a lease. A record lives by memcached's
// expiry, rounded up as a lease's is (expirySeconds): at least its TTL
// after memcached got the write, up to about three seconds more (past 30
// days, see recordExpiry). See the
// package documentation, "Records and claims", for the clock of
// ClaimWithin and for eviction.

// recordVersion begins a record item's value:
// "r1|<order, or - >|<nonce>|<value>".
const recordVersion = "r1"

type record struct {
	ord    int64
	hasOrd bool
	nonce  string // a claim's: tells the claimer its own item
	value  string
}

func (r record) encode() []byte {
	b := make([]byte, 0, 32+len(r.nonce)+len(r.value))
	b = append(b, recordVersion...)
	b = append(b, '|')
	if r.hasOrd {
		b = strconv.AppendInt(b, r.ord, 10)
	} else {
		b = append(b, '-')
	}
	b = append(b, '|')
	b = append(b, r.nonce...)
	b = append(b, '|')
	return append(b, r.value...)
}

var errBadRecord = errors.New("memcachelock: an item of the record namespace does not hold a record (another program writes there?)")

func decodeRecord(v []byte) (record, error) {
	var f [3][]byte
	rest := v
	for i := range f {
		var ok bool
		if f[i], rest, ok = bytes.Cut(rest, []byte{'|'}); !ok {
			return record{}, errBadRecord
		}
	}
	if string(f[0]) != recordVersion {
		return record{}, errBadRecord
	}
	r := record{nonce: string(f[2]), value: string(rest)}
	if string(f[1]) != "-" {
		ord, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return record{}, errBadRecord
		}
		r.ord, r.hasOrd = ord, true
	}
	return r, nil
}

// recordExpiry is the memcached expiry of a record of ttl: as a lease's
// (expirySeconds) up to memcached's 30 days of relative expiries; past
// them an absolute unix time, by this Client's clock, ttl and the lease
// rounding and the clock skew after now (memcached judges it by its wall
// clock, so a record that long may end earlier or later by as much as
// the two clocks differ).
func (b *backend) recordExpiry(ttl time.Duration) (int32, error) {
	if exp, err := expirySeconds(ttl); err == nil {
		return exp, nil
	}
	at := b.clock().Add(ttl + tickSlack + b.skew + time.Second - 1).Unix()
	if at > math.MaxInt32 {
		return 0, fmt.Errorf("memcachelock: a record of %v would end past memcached's clock (2038)", ttl)
	}
	return int32(at), nil
}

// recordName is the item of a record.
func (b *backend) recordName(name string) string { return b.hashName(name) + ":r" }

// readRecord gets a record item: nil when there is none.
func (b *backend) readRecord(key string) (*memcache.Item, record, error) {
	it, err := b.mc.Get(key)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		return nil, record{}, nil
	case err != nil:
		return nil, record{}, wrap(err)
	}
	r, err := decodeRecord(it.Value)
	if err != nil {
		return nil, record{}, err
	}
	return it, r, nil
}

func (b *backend) SetRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	exp, err := b.recordExpiry(ttl)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return wrap(b.mc.Set(&memcache.Item{Key: b.recordName(key), Value: record{value: value}.encode(), Expiration: exp}))
}

func (b *backend) GetRecord(ctx context.Context, key string) (string, bool, error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	it, r, err := b.readRecord(b.recordName(key))
	if err != nil || it == nil {
		return "", false, err
	}
	return r.value, true, nil
}

// ClaimRecord is memcached's add: it stores only if there is no item.
func (b *backend) ClaimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	exp, err := b.recordExpiry(ttl)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	err = b.mc.Add(&memcache.Item{Key: b.recordName(key), Value: record{value: value}.encode(), Expiration: exp})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, memcache.ErrNotStored):
		return false, nil
	}
	return false, wrap(err)
}

// ClaimRecordWithin adds the claim with an expiry long enough that every
// other node still finds it while its own clock is not past the deadline,
// and judges lateness by this node's clock read after memcached answered
// the add (see claimLife and the package documentation).
func (b *backend) ClaimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (core.ClaimVerdict, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	name := b.recordName(key)
	dl := planned.UnixMilli() + window.Milliseconds()
	before := b.clock().UnixMilli()
	if before > dl { // late already: nothing to store, only a claim to report
		it, _, err := b.readRecord(name)
		switch {
		case err != nil:
			return 0, err
		case it != nil:
			return core.ClaimTaken, nil
		}
		return core.ClaimLate, nil
	}
	exp, err := b.recordExpiry(claimLife(before, dl, ttl, b.skew))
	if err != nil {
		return 0, err
	}
	nonce := rand.Text()
	err = b.mc.Add(&memcache.Item{Key: name, Value: record{nonce: nonce, value: value}.encode(), Expiration: exp})
	switch {
	case errors.Is(err, memcache.ErrNotStored):
		return core.ClaimTaken, nil
	case err != nil:
		return 0, wrap(err)
	}
	if b.clock().UnixMilli() > dl {
		// Stored, but the add may have reached memcached after the
		// deadline: take it back (a compare-and-swap to an expiry in the
		// past, of this claim's item only).
		b.unclaim(name, nonce)
		return core.ClaimLate, nil
	}
	return core.Claimed, nil
}

// claimLife is how long memcached must keep a claim sent at beforeMs
// (this node's clock, read before sending) with the deadline dlMs: ttl,
// or until skew past the deadline, whichever is longer. Another node
// whose clock is at most skew behind this one's reads a time past the
// deadline before the claim can be gone, so its own add, which it judges
// by its clock read after memcached answered, is late.
func claimLife(beforeMs, dlMs int64, ttl, skew time.Duration) time.Duration {
	return max(ttl, time.Duration(dlMs-beforeMs)*time.Millisecond+skew+time.Millisecond)
}

// unclaim expires the claim item name if it is still the one of nonce
// (best effort: a late claim left behind is a claim nobody runs).
func (b *backend) unclaim(name, nonce string) {
	for range maxAttempts {
		it, r, err := b.readRecord(name)
		if err != nil || it == nil || r.nonce != nonce {
			return
		}
		it.Expiration = -1
		if err := b.mc.CompareAndSwap(it); !errors.Is(err, memcache.ErrCASConflict) {
			return
		}
	}
}

// SetRecordIfNewer reads the item and writes it with a compare-and-swap
// against the item read (or an add where there was none), unless the item
// holds a greater order.
func (b *backend) SetRecordIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error) {
	exp, err := b.recordExpiry(ttl)
	if err != nil {
		return false, err
	}
	name := b.recordName(key)
	v := record{ord: order, hasOrd: true, value: value}.encode()
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		it, cur, err := b.readRecord(name)
		if err != nil {
			return false, err
		}
		if it == nil {
			err = b.mc.Add(&memcache.Item{Key: name, Value: v, Expiration: exp})
		} else {
			if cur.hasOrd && cur.ord > order {
				return false, nil
			}
			it.Value, it.Expiration = v, exp
			err = b.mc.CompareAndSwap(it)
		}
		switch {
		case err == nil:
			return true, nil
		case gone(err), errors.Is(err, memcache.ErrCASConflict):
			continue // added, changed or gone meanwhile: look again
		}
		return false, wrap(err)
	}
	return false, fmt.Errorf("memcachelock: the record %q changed under %d attempts in a row", key, maxAttempts)
}
