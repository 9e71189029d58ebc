package zklock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/latchkey/latchkey/core"
)

// Records (core.CapClaims): one persistent znode per record under
// <root>/.records (a lock node never begins with '.': it is escaped), its
// data the record's value with its TTL, judged by the time ZooKeeper
// stamps on writes. See the package documentation, "Records and claims".

// recState is a backend's sweeping of expired records.
type recState struct {
	mu       sync.Mutex
	last     time.Time
	every    time.Duration
	sweeping bool
	closed   bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

func (b *backend) SetRecord(ctx context.Context, key, value string, ttl time.Duration) error {
	defer b.maybeSweep()
	path := b.recordPath(key)
	data := zrec{ttlMs: ttl.Milliseconds(), value: value}.encode()
	for range recordAttempts {
		_, err := call(ctx, func() (*zk.Stat, error) { return b.conn.Set(path, data, -1) })
		if !errors.Is(err, zk.ErrNoNode) {
			return wrapErr("write "+path, err)
		}
		_, err = b.createRecord(ctx, path, data)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNoNode):
			if err := b.ensureRecords(ctx); err != nil {
				return err
			}
		case !errors.Is(err, zk.ErrNodeExists):
			return wrapErr("create "+path, err)
		}
	}
	return errRecordBusy
}

func (b *backend) GetRecord(ctx context.Context, key string) (string, bool, error) {
	r, st, ok, err := b.readRecord(ctx, b.recordPath(key), false)
	if err != nil || !ok {
		return "", false, err
	}
	now, err := b.now(ctx)
	if err != nil {
		return "", false, err
	}
	if !r.live(st, now) {
		return "", false, nil
	}
	return r.value, true, nil
}

func (b *backend) ClaimRecord(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	v, err := b.claimRecord(ctx, key, zrec{ttlMs: ttl.Milliseconds(), value: value})
	return v == core.Claimed, err
}

func (b *backend) ClaimRecordWithin(ctx context.Context, key, value string, ttl time.Duration, planned time.Time, window time.Duration) (core.ClaimVerdict, error) {
	dl := planned.UnixMilli() + window.Milliseconds()
	// Live for ttl, or until just past the deadline, whichever is later:
	// every claim that reaches the leader by the deadline finds this one.
	return b.claimRecord(ctx, key, zrec{ttlMs: ttl.Milliseconds(), floorMs: dl + 1, dl: dl, hasDl: true, value: value})
}

// claimRecord stores r at key unless a live record is there. It creates the
// znode, or rewrites an expired one (conditional on the version judged
// expired), and judges the write by its own stamp: a claim with a
// deadline stamped after it is void, is deleted, and is ClaimLate.
func (b *backend) claimRecord(ctx context.Context, key string, r zrec) (core.ClaimVerdict, error) {
	defer b.maybeSweep()
	path := b.recordPath(key)
	data := r.encode()
	for attempt := range recordAttempts {
		gen, err := b.gen(ctx)
		if err != nil {
			return 0, err
		}
		st, err := b.createRecord(ctx, path, data)
		switch {
		case err == nil:
			return b.judge(ctx, path, st, gen, r), nil
		case errors.Is(err, zk.ErrNoNode):
			if err := b.ensureRecords(ctx); err != nil {
				return 0, err
			}
			continue
		case !errors.Is(err, zk.ErrNodeExists):
			return 0, wrapErr("create "+path, err)
		}
		old, ost, ok, err := b.readRecord(ctx, path, attempt > 0)
		if err != nil && !errors.Is(err, errBadRecord) {
			return 0, err
		}
		if !ok && err == nil {
			continue // deleted meanwhile
		}
		now, err2 := b.now(ctx)
		if err2 != nil {
			return 0, err2
		}
		if err == nil && old.live(ost, now) {
			return core.ClaimTaken, nil
		}
		if r.hasDl && now > r.dl {
			return core.ClaimLate, nil
		}
		st, err = b.replace(ctx, path, data, ost.Version, gen)
		switch {
		case err == nil:
			return b.judge(ctx, path, st, gen, r), nil
		case !raced(err):
			return 0, wrapErr("write "+path, err)
		}
	}
	return 0, errRecordBusy
}

// judge is the verdict of a claim written with stat: ClaimLate if it has
// a deadline its write was stamped after (the void record is deleted,
// best effort), else Claimed.
func (b *backend) judge(ctx context.Context, path string, st *zk.Stat, gen int32, r zrec) core.ClaimVerdict {
	if r.hasDl && st.Mtime > r.dl {
		_ = b.remove(context.WithoutCancel(ctx), path, st.Version, gen)
		return core.ClaimLate
	}
	return core.Claimed
}

func (b *backend) SetRecordIfNewer(ctx context.Context, key, value string, order int64, ttl time.Duration) (bool, error) {
	defer b.maybeSweep()
	path := b.recordPath(key)
	data := zrec{ttlMs: ttl.Milliseconds(), ord: order, hasOrd: true, value: value}.encode()
	for attempt := range recordAttempts {
		gen, err := b.gen(ctx)
		if err != nil {
			return false, err
		}
		old, ost, ok, err := b.readRecord(ctx, path, attempt > 0)
		if err != nil && !errors.Is(err, errBadRecord) {
			return false, err
		}
		if !ok && err == nil {
			_, err := b.createRecord(ctx, path, data)
			switch {
			case err == nil:
				return true, nil
			case errors.Is(err, zk.ErrNoNode):
				if err := b.ensureRecords(ctx); err != nil {
					return false, err
				}
			case !errors.Is(err, zk.ErrNodeExists):
				return false, wrapErr("create "+path, err)
			}
			continue
		}
		if err == nil && old.hasOrd && old.ord > order {
			now, err := b.now(ctx)
			if err != nil {
				return false, err
			}
			if old.live(ost, now) {
				return false, nil
			}
		}
		_, err = b.replace(ctx, path, data, ost.Version, gen)
		switch {
		case err == nil:
			return true, nil
		case !raced(err):
			return false, wrapErr("write "+path, err)
		}
	}
	return false, errRecordBusy
}

// maybeSweep starts a sweep of the expired records if none ran for
// sweepEvery in this backend.
func (b *backend) maybeSweep() {
	s := &b.rs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.sweeping || time.Since(s.last) < s.every {
		return
	}
	s.last, s.sweeping = time.Now(), true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		b.sweep(ctx)
		s.mu.Lock()
		s.sweeping = false
		s.mu.Unlock()
	}()
}

// sweep deletes the records expired by the server's clock (up to
// sweepMax of them), each conditional on its version and the generation
// read before it (see gen): a record rewritten meanwhile stays.
func (b *backend) sweep(ctx context.Context) {
	names, err := call(ctx, func() ([]string, error) {
		names, _, err := b.conn.Children(b.recordsPath())
		return names, err
	})
	if err != nil {
		return
	}
	now, err := b.now(ctx)
	if err != nil {
		return
	}
	for i, name := range names {
		if i == sweepMax || ctx.Err() != nil {
			return
		}
		if strings.HasPrefix(name, ".") { // the generation and the clock
			continue
		}
		path := b.recordsPath() + "/" + name
		gen, err := b.gen(ctx)
		if err != nil {
			return
		}
		r, st, ok, err := b.readRecord(ctx, path, false)
		if err != nil || !ok || r.live(st, now) {
			continue
		}
		_ = b.remove(ctx, path, st.Version, gen)
	}
}

// closeRecords stops a sweep and waits for it.
func (b *backend) closeRecords() {
	b.rs.mu.Lock()
	b.rs.closed = true
	b.rs.mu.Unlock()
	close(b.rs.stop)
	b.rs.wg.Wait()
}
