package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Records (core.CapClaims): one etcd key per record, recordPrefix and the
// record's name, attached to an etcd lease of its own of the record's TTL
// (whole seconds, rounded up, at least etcd's minimum): etcd deletes it
// when the lease runs out, by the leader's lease clock. See the package
// documentation, "Records and claims", for the clock of ClaimWithin.

// recordPrefix begins the etcd key of every record. A lease's key is
// "<prefix>:{<key>}" with a prefix of at least one byte and no brace, so
// it never begins with '{': records never collide with leases, and
// ListLeases, which lists under "<prefix>:{", never meets one.
const recordPrefix = "{rec}"

// recordConfig is the clock ClaimRecordWithin judges by.
type recordConfig struct {
	skew  time.Duration    // WithClockSkew
	clock func() time.Time // time.Now but in tests
}

// A record's value: "r1|<order, or - >|<value>".
const recordVersion = "r1"

func encodeRecord(value string, ord int64, hasOrd bool) string {
	o := "-"
	if hasOrd {
		o = strconv.FormatInt(ord, 10)
	}
	return recordVersion + sep + o + sep + value
}

func decodeRecord(v []byte) (value string, ord int64, hasOrd bool, err error) {
	ver, rest, ok1 := strings.Cut(string(v), sep)
	o, value, ok2 := strings.Cut(rest, sep)
	if !ok1 || !ok2 || ver != recordVersion {
		return "", 0, false, fmt.Errorf("etcdlock: a key of the record namespace does not hold a record (another program writes there?)")
	}
	if o == "-" {
		return value, 0, false, nil
	}
	n, err := strconv.ParseInt(o, 10, 64)
	if err != nil {
		return "", 0, false, fmt.Errorf("etcdlock: a record's order %q: %w", o, err)
	}
	return value, n, true, nil
}

var _ core.RecordStore = (*backend)(nil)

func recordKey(name string) string { return recordPrefix + name }

// SetRecord puts the record on a new etcd lease, and revokes the one the
// key had before.
func (b *backend) SetRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	g, err := b.lease.Grant(ctx, ttlSeconds(ttl))
	if err != nil {
		return err
	}
	resp, err := b.kv.Put(ctx, recordKey(key), encodeRecord(value, 0, false), clientv3.WithLease(g.ID), clientv3.WithPrevKV())
	if err != nil {
		b.revoke(ctx, int64(g.ID)) // the put's fate is unknown: at worst the record goes early
		return err
	}
	if resp.PrevKv != nil && resp.PrevKv.Lease != 0 {
		b.revoke(ctx, resp.PrevKv.Lease)
	}
	return nil
}

func (b *backend) GetRecord(ctx context.Context, key string) (string, bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	resp, err := b.kv.Get(ctx, recordKey(key))
	if err != nil || len(resp.Kvs) == 0 {
		return "", false, err
	}
	v, _, _, err := decodeRecord(resp.Kvs[0].Value)
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

// claim creates the record on a new etcd lease of life if the key does not
// exist (one transaction); the lease is revoked unless the key is on it.
func (b *backend) claim(ctx context.Context, key, value string, life time.Duration) (ok bool, lease clientv3.LeaseID, err error) {
	g, err := b.lease.Grant(ctx, ttlSeconds(life))
	if err != nil {
		return false, 0, err
	}
	k := recordKey(key)
	resp, err := b.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, encodeRecord(value, 0, false), clientv3.WithLease(g.ID))).
		Commit()
	if err != nil || !resp.Succeeded {
		b.revoke(ctx, int64(g.ID)) // also undoes a creation whose answer was lost
		return false, 0, err
	}
	return true, g.ID, nil
}

func (b *backend) ClaimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	ok, _, err := b.claim(ctx, key, value, ttl)
	return ok, err
}

// ClaimRecordWithin creates the claim on an etcd lease long enough that
// every other Client still finds it while its own clock is not past the
// deadline, and judges lateness by this Client's clock read after etcd
// committed the claim (see claimLife and the package documentation).
func (b *backend) ClaimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (core.ClaimVerdict, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	dl := planned.UnixMilli() + window.Milliseconds()
	before := b.rec.clock().UnixMilli()
	if before > dl { // late already: nothing to store, only a claim to report
		resp, err := b.kv.Get(ctx, recordKey(key), clientv3.WithCountOnly())
		switch {
		case err != nil:
			return 0, err
		case resp.Count > 0:
			return core.ClaimTaken, nil
		}
		return core.ClaimLate, nil
	}
	ok, lease, err := b.claim(ctx, key, value, claimLife(before, dl, ttl, b.rec.skew))
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return core.ClaimTaken, nil
	}
	if b.rec.clock().UnixMilli() > dl {
		// Stored, but the transaction may have been committed after the
		// deadline: take it back (revoking its lease deletes the key).
		b.revoke(ctx, int64(lease))
		return core.ClaimLate, nil
	}
	return core.Claimed, nil
}

// claimLife is how long etcd must keep a claim whose lease is granted
// after beforeMs (this Client's clock) with the deadline dlMs: ttl, or
// until skew past the deadline, whichever is longer. The lease's countdown
// starts after beforeMs; another Client whose clock is at most skew behind
// this one's reads a time past the deadline before the claim can be gone,
// so its own claim, which it judges by its clock read after etcd
// committed it, is late.
func claimLife(beforeMs, dlMs int64, ttl, skew time.Duration) time.Duration {
	return max(ttl, time.Duration(dlMs-beforeMs)*time.Millisecond+skew+time.Millisecond)
}

// SetRecordIfNewer reads the record and puts the new one on a lease of its
// own in a transaction that succeeds only if the key is unchanged since
// (or still absent), unless the record read holds a greater order.
func (b *backend) SetRecordIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error) {
	ctx, cancel := b.bound(ctx)
	defer cancel()
	k := recordKey(key)
	var g *clientv3.LeaseGrantResponse
	defer func() {
		if g != nil {
			b.revoke(ctx, int64(g.ID))
		}
	}()
	for range maxAttempts {
		resp, err := b.kv.Get(ctx, k)
		if err != nil {
			return false, err
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
		var oldLease int64
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			_, ord, hasOrd, err := decodeRecord(kv.Value)
			if err != nil {
				return false, err
			}
			if hasOrd && ord > order {
				return false, nil
			}
			cmp, oldLease = clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision), kv.Lease
		}
		if g == nil {
			if g, err = b.lease.Grant(ctx, ttlSeconds(ttl)); err != nil {
				g = nil
				return false, err
			}
		}
		tr, err := b.kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, encodeRecord(value, order, true), clientv3.WithLease(g.ID))).Commit()
		if err != nil {
			g = nil // the put's fate is unknown: g may carry the record (revoking g would delete it); left to its TTL
			return false, err
		}
		if tr.Succeeded {
			g = nil // the record's now
			if oldLease != 0 {
				b.revoke(ctx, oldLease)
			}
			return true, nil
		}
	}
	return false, errBusy
}

// listRecords is ListRecords: the records whose names begin with prefix,
// read as ListLeases reads leases.
func (b *backend) listRecords(ctx context.Context, prefix string, fn func(string) bool) error {
	return b.ListLeases(ctx, recordKey(prefix), func(k string) bool {
		return fn(strings.TrimPrefix(k, recordPrefix))
	})
}
