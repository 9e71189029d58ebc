package zklock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
)

// The znodes of the records (records.go): their paths, data, the server's
// clock, and the conditional writes that keep a version naming one znode.

const (
	// recordsDir is the records' znode under the root.
	recordsDir = "/.records"
	// genNode, under recordsDir, is bumped by every deletion of a record,
	// and checked by every conditional rewrite of one (see replace). A
	// record's name never begins with '.'.
	genNode = ".gen"
	// clockNode, under recordsDir, has its data rewritten to read the
	// server's clock (now).
	clockNode = ".clock"
	// recordAttempts bounds the rounds of a record call that lost a race.
	recordAttempts = 16
	// sweepEvery is how often a backend deletes the expired records (at
	// its first record write after that much time).
	sweepEvery = time.Minute
	// sweepMax bounds the records one sweep looks at.
	sweepMax = 1000
)

var errRecordBusy = errors.New("zklock: the record kept changing; gave up")

// A zrec is a record's data: "r1 <ttl ms> <floor ms> <deadline ms|-> <order|->\n<value>".
// The record lives until its write's mtime + ttl or floor (unix ms, the
// server's clock), whichever is later; a claim with a deadline whose write
// is stamped after the deadline is void — no record at all.
type zrec struct {
	ttlMs, floorMs int64
	dl             int64
	hasDl          bool
	ord            int64
	hasOrd         bool
	value          string
}

func (r zrec) encode() []byte {
	num := func(b []byte, n int64, ok bool) []byte {
		b = append(b, ' ')
		if !ok {
			return append(b, '-')
		}
		return strconv.AppendInt(b, n, 10)
	}
	b := append(make([]byte, 0, 64+len(r.value)), "r1"...)
	b = num(b, r.ttlMs, true)
	b = num(b, r.floorMs, true)
	b = num(b, r.dl, r.hasDl)
	b = num(b, r.ord, r.hasOrd)
	b = append(b, '\n')
	return append(b, r.value...)
}

var errBadRecord = errors.New("zklock: a znode of the records does not hold a record (another program writes there?)")

func decodeRecord(data []byte) (zrec, error) {
	head, value, ok := bytes.Cut(data, []byte{'\n'})
	f := bytes.Split(head, []byte{' '})
	if !ok || len(f) != 5 || string(f[0]) != "r1" {
		return zrec{}, errBadRecord
	}
	var n [4]int64
	var has [4]bool
	for i, s := range f[1:] {
		if string(s) == "-" {
			continue
		}
		v, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return zrec{}, errBadRecord
		}
		n[i], has[i] = v, true
	}
	if !has[0] || !has[1] {
		return zrec{}, errBadRecord
	}
	return zrec{ttlMs: n[0], floorMs: n[1], dl: n[2], hasDl: has[2], ord: n[3], hasOrd: has[3], value: string(value)}, nil
}

// live reports whether the record whose znode has stat is live at now
// (unix ms, the server's clock).
func (r zrec) live(stat *zk.Stat, now int64) bool {
	if r.hasDl && stat.Mtime > r.dl {
		return false // a late claim: void
	}
	return now < max(stat.Mtime+r.ttlMs, r.floorMs)
}

func (b *backend) recordsPath() string { return b.root + recordsDir }
func (b *backend) genPath() string     { return b.root + recordsDir + "/" + genNode }
func (b *backend) clockPath() string   { return b.root + recordsDir + "/" + clockNode }
func (b *backend) recordPath(key string) string {
	return escapedPath(b.recordsPath(), key)
}

// ensureRecords creates the root's path, the records' znode, and the
// clock and generation znodes under it, as needed.
func (b *backend) ensureRecords(ctx context.Context) error {
	mk := func(path string) error {
		_, err := call(ctx, func() (string, error) { return b.conn.Create(path, nil, zk.FlagPersistent, b.acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return wrapErr("create "+path, err)
		}
		return nil
	}
	for i := 1; i <= len(b.root); i++ {
		if i == len(b.root) || b.root[i] == '/' {
			if err := mk(b.root[:i]); err != nil {
				return err
			}
		}
	}
	if err := mk(b.recordsPath()); err != nil {
		return err
	}
	if err := mk(b.clockPath()); err != nil {
		return err
	}
	return mk(b.genPath())
}

// now returns the server's clock (unix ms): the mtime a write to the
// clock znode is stamped with, by the leader that orders it.
func (b *backend) now(ctx context.Context) (int64, error) {
	for range 3 {
		st, err := call(ctx, func() (*zk.Stat, error) { return b.conn.Set(b.clockPath(), nil, -1) })
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if err := b.ensureRecords(ctx); err != nil {
				return 0, err
			}
			continue
		case errors.Is(err, zk.ErrBadVersion):
			// Its version reached the int32 limit (servers refuse to go
			// past it): start it again.
			_, _ = call(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(b.clockPath(), -1) })
			continue
		}
		if err != nil {
			return 0, wrapErr("read the server's clock", err)
		}
		return st.Mtime, nil
	}
	return 0, errRecordBusy
}

// gen returns the version of the generation znode. Read before a record,
// it makes a rewrite or deletion of that record conditional on no record
// having been deleted since: a version then names one znode, never a
// later one made again under the same name (which starts at the same
// versions).
func (b *backend) gen(ctx context.Context) (int32, error) {
	for range 2 {
		type res struct {
			ok   bool
			stat *zk.Stat
		}
		r, err := call(ctx, func() (res, error) {
			ok, st, err := b.conn.Exists(b.genPath())
			return res{ok, st}, err
		})
		if err != nil {
			return 0, wrapErr("read "+b.genPath(), err)
		}
		if r.ok {
			return r.stat.Version, nil
		}
		if err := b.ensureRecords(ctx); err != nil {
			return 0, err
		}
	}
	return 0, errRecordBusy
}

// readRecord reads a record's znode (synced with the leader first when
// sync): ok is false if there is none.
func (b *backend) readRecord(ctx context.Context, path string, sync bool) (zrec, *zk.Stat, bool, error) {
	if sync {
		if err := b.sync(ctx, path); err != nil {
			return zrec{}, nil, false, err
		}
	}
	data, st, err := b.get(ctx, path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return zrec{}, nil, false, nil
	case err != nil:
		return zrec{}, nil, false, wrapErr("read "+path, err)
	}
	r, err := decodeRecord(data)
	return r, st, err == nil, err
}

// multi runs ops as one transaction and returns the Stat of the last one
// (a SetData's).
func (b *backend) multi(ctx context.Context, ops ...any) (*zk.Stat, error) {
	res, err := call(ctx, func() ([]zk.MultiResponse, error) { return b.conn.Multi(ops...) })
	if err != nil {
		return nil, err
	}
	if len(res) != len(ops) {
		return nil, fmt.Errorf("zklock: %d answers to a transaction of %d", len(res), len(ops))
	}
	return res[len(res)-1].Stat, nil
}

// createRecord makes a record's znode, answering with the Stat of its write
// (a create and a SetData of the same data in one transaction: the create
// alone does not return it).
func (b *backend) createRecord(ctx context.Context, path string, data []byte) (*zk.Stat, error) {
	return b.multi(ctx,
		&zk.CreateRequest{Path: path, Data: data, Acl: b.acl, Flags: zk.FlagPersistent},
		&zk.SetDataRequest{Path: path, Data: data, Version: 0})
}

// replace rewrites the record at path if it is still at version and no
// record was deleted since gen was read.
func (b *backend) replace(ctx context.Context, path string, data []byte, version, gen int32) (*zk.Stat, error) {
	return b.multi(ctx,
		&zk.CheckVersionRequest{Path: b.genPath(), Version: gen},
		&zk.SetDataRequest{Path: path, Data: data, Version: version})
}

// remove deletes the record at path if it is still at version and no
// record was deleted since gen was read; it bumps the generation.
func (b *backend) remove(ctx context.Context, path string, version, gen int32) error {
	_, err := b.multi(ctx,
		&zk.DeleteRequest{Path: path, Version: version},
		&zk.SetDataRequest{Path: b.genPath(), Version: gen})
	return err
}

// raced reports an error that means another write came first.
func raced(err error) bool {
	return errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)
}
