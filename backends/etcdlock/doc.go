// Package etcdlock runs latchkey's lock on etcd (v3 API), for a service
// that has an etcd cluster and no Redis. New returns a *core.Client: Lock,
// TryLock, Do, WithFair, Campaign, Observe, LockAll, Inspect, Scan and
// Records work as on Redis, and so do the adapters built on them: cronlock
// runs on it (see "Records and claims" for its clock).
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	defer cli.Close()
//	locks, err := etcdlock.New(cli)
//	…
//	err = locks.Do(ctx, "nightly-report", run)
//
// It is tested with the go.etcd.io/etcd/client/v3 version in its go.mod
// against etcd 3.4 (Debian's etcd-server); it uses nothing newer than the
// 3.4 API.
//
// # How it works
//
// A lease is one etcd key, named as the Client names it
// ("latchkey:{<key>}", under the client's namespace if it has one), whose
// value is the holder's token and metadata, attached to an etcd lease of
// its own. Reads are linearizable (they go through the leader).
//
//   - Acquire grants an etcd lease of the TTL rounded up to whole seconds
//     (etcd leases count seconds, and etcd raises a TTL below its minimum,
//     1.5 election timeouts rounded up: 2 s with the default 1 s election
//     timeout), then creates the key on it in a transaction that succeeds
//     only if the key does not exist. A key held by another token is
//     contention, and the unused etcd lease is revoked; so is the lease of
//     an attempt whose answer was lost, which deletes the key if it was
//     created.
//   - Re-entry (the token that holds the key) keeps the key and its fence
//     and never shortens it: the key's etcd lease is renewed, which gives
//     it its whole TTL again, and the key is checked not to have changed
//     meanwhile; if the TTL asked for is longer than that lease's, the key
//     moves to the new, longer lease, which is then renewed once more, and
//     the old lease is revoked. A move whose answer was lost leaves the
//     new lease to its TTL (renewed once more, best effort), never
//     revoked: it may carry the holder's key.
//   - Extend reads the key (another token, or none: core.ErrNotHeld),
//     renews its etcd lease (KeepAliveOnce), and then checks that the key
//     is unchanged, so that the lease renewed was the key's at that moment.
//     It reports the etcd lease's whole TTL as the time left: etcd starts
//     it when the leader handles the renewal, after the request was sent.
//     A longer TTL moves the key to a new lease, as a re-entry does.
//   - Release deletes the key if its value is the token's (compare and
//     delete), and revokes its etcd lease. In the same transaction it
//     deletes the token's queue entry, if it has one (below).
//
// # Fair queueing
//
// A waiter that queues (core.WithFair, or a Lock that has waited 50 ms:
// core's starvation guard) is one etcd key of its own, its entry,
// "{queue}<n>:<lease key>/<token>" (n is the lease key's length, so no
// key's queue contains another's; no lease key starts with a brace, so
// Scan never lists an entry). The entry is attached to an etcd lease of 3
// s (or etcd's minimum TTL, if larger) that the waiter renews each time it
// asks again, at least every second; its create revision is its place.
//
//   - No acquisition creates the lease key while its queue has an entry:
//     the creating transaction compares the whole queue's range too. So
//     nobody barges in — not a TryLock, not a waiter that has not queued
//     yet — and a free key with a queue is kept for the queue's head.
//   - The head (no entry with a lower create revision) takes the free key
//     on a fresh etcd lease, in one transaction that checks the key is
//     free, its entry unchanged and no entry older, and deletes its
//     entry. The fence is that transaction's revision, as for any
//     acquisition: a release hands nothing over, so no lease is written
//     for a waiter that may be gone, and the head's lease is one it
//     granted itself (the Client believes it as any other).
//   - Each process's watch of a key follows its queue, as etcd's own
//     Mutex does (each waiter watches the key just ahead of it): with one
//     of its waiters at the head, the lease key, whose deletion — a
//     release, or an expiry — is delivered to that waiter by its token;
//     with its first waiter further back, only the entry just ahead of
//     it, whose deletion (that waiter took the key, gave up or died)
//     moves the watch and wakes nobody; with no waiter queued, the lease
//     key, as under Capabilities. So a release or an expiry wakes one
//     waiter across all processes: the head.
//   - A waiter that gives up leaves with Release of its token, which
//     deletes its entry: the next one's process sees it and, if the key
//     is free, wakes that waiter. Under a caller's token (core.WithToken)
//     it leaves with Leave (core.QueueLeaver), which deletes the entry
//     alone: another process that shares the token and took the key just
//     then keeps it. A waiter that dies without leaving (its
//     process or connection gone) stops renewing its entry, which etcd
//     deletes within 3 s: no longer does it hold the key up.
//   - A waiter asking again, still queued, costs a read and a keep-alive
//     of its entry; queueing costs a grant and a transaction. Inspect
//     reports Waiters (the entries) and OldestWait, from the time the
//     head queued by the head's clock (stored in its entry).
//
// Fair order is the order in which the entries were created: a waiter
// whose entry expired (it did not ask again for 3 s) queues again, last.
//
// A renewed lease that ends with a key deleted, taken by another token, or
// an etcd lease etcd no longer knows is core.ErrNotHeld: the holder is told
// Lost at once. A renewal that fails (no quorum, no member reachable) is
// retried by the Client until the lease's deadline, and then the holder is
// told Lost — before etcd can free the key, since etcd keeps the lease at
// least as long as the holder believes it (see Clocks).
//
// # Fences
//
// A lease's fence is its key's create revision: the revision of the
// transaction that created it. etcd's revision is one counter for the
// whole cluster, raised by every write and committed through raft, so
// fences rise strictly per key and across keys, whatever was deleted, and
// a compaction does not lower it. Re-entry keeps the fence (a Put on an
// existing key keeps its create revision). Inspect of a free key reports
// the store's current revision: at least every fence given out for the key
// so far, and below the next one. Restoring a snapshot into a new cluster
// takes revisions back to the snapshot's unless the restore bumps them
// (snapshot restore --bump-revision, in later 3.5 releases and 3.6; not in
// 3.4): after a restore without it, fence-checking stores must be told.
//
// # Clocks
//
// Expiry is judged by etcd, never by the caller's clock: the leader's
// lessor counts each lease's TTL on its own monotonic clock from the moment
// it grants or renews it, and deletes the keys of a lease that ran out
// (it looks twice a second, so a key outlives its lease by up to half a
// second). The holder believes its lease for the TTL it asked for from
// when it sent the request, minus the Client's drift margin; etcd's lease
// is at least that long (rounded up to seconds, counted from later). A new
// leader restarts every lease's countdown with an election timeout to
// spare, so a failover lengthens leases and never shortens them; and a
// renewal of a lease that has run out waits until etcd has deleted its
// keys, then fails. (A renewal after a failover restarts the countdown at
// the lease's TTL, dropping the failover's spare time, which no holder
// believed.) What is assumed is that the leader's clock does not run
// faster than the holder's by more than the drift margin.
//
// # Capabilities
//
//   - core.CapFair: fair queueing, above.
//   - core.CapNotify: a key that has waiters in this process is watched
//     from the revision after Subscribe's read, so every deletion after it
//     — a release anywhere, or an expiry — wakes a waiter (with waiters of
//     this process queued, the watch follows the queue, above). The watch
//     requires a leader; when it ends (a partitioned member, a compaction)
//     the waiters are woken to ask again and the watch is set up again.
//     WithNotify(false) turns watches off: waiters then poll with backoff,
//     never sleeping past the holder's expiry (as etcd reports it, rounded
//     down to seconds).
//   - core.CapReplicaAck: every write — a grant, an acquisition, a
//     move to a longer lease, a release — is acknowledged only once a
//     quorum of members has committed it through raft, so a failover
//     cannot drop a lease that was confirmed. (A renewal itself is handled by the leader's lessor
//     and not replicated; a new leader restarts every countdown, which only
//     lengthens it.)
//   - core.CapList: Client.Scan reads the keys under the prefix, 256 per
//     request, in key order.
//   - core.CapClaims: Client.Records, and so cronlock; see "Records and
//     claims" below.
//
// Not offered:
//
//   - core.CapPrimitives (semaphores, read-write locks) and Evict.
//
// # Records and claims
//
// A record is an etcd key of its own, "{rec}" and the record's name (a
// lease's key never begins with '{', so records never meet leases, nor
// appear in Scan; Records.Scan lists them), attached to an etcd lease of
// the record's TTL, rounded up to whole seconds and raised to etcd's
// minimum as a lock's is: etcd deletes the key when its lease runs out,
// by the leader's lease clock. Set puts the key on a new etcd lease and
// revokes the old one; Claim creates the key in a transaction that
// succeeds only if it does not exist; SetIfNewer is a read and a
// transaction conditional on the key's revision.
//
// Records.ClaimWithin — cronlock's claim of a tick — must refuse a claim
// that arrives after planned + window, judged by the store's clock. etcd
// has no such clock (leases measure durations, not instants; a
// transaction cannot compare with the time), so a claim is judged by the
// claiming Client's clock, and is kept long enough that this is safe. The
// claimer reads its clock before granting the claim's etcd lease and again
// after etcd committed the claim:
//
//   - before, past the deadline: late, nothing is stored (or taken, if a
//     claim is there);
//   - the claim's etcd lease runs until at least skew past the deadline,
//     counted from the first reading (and at least its TTL);
//   - after the commit, past the deadline: the transaction may have been
//     committed late; the claim is taken back (its etcd lease is revoked,
//     which deletes it) and the answer is late.
//
// skew is WithClockSkew (DefaultClockSkew, one second): the most any two
// Clients' clocks differ, including how far their rates differ from the
// etcd leader's over a claim's life. If it holds, one claim per tick
// succeeds: a second claim can be created only once the first is deleted,
// that is later than skew past the deadline by the first claimer's clock,
// so later than the deadline by the second claimer's clock — which it
// reads after its commit, and finds late. A leader change only lengthens
// leases (see Clocks). A clock further off than skew can let a tick run
// twice; a clock stepped forward makes claims late (a tick is skipped),
// never doubled. A claim taken back after a late answer may leave the
// tick unrun: at most once, not exactly once.
//
// Costs: on a free key TryLock is two raft writes (a grant and a
// transaction) and Release two (a transaction and a revoke); a renewal is a
// read, a keep-alive and a read. An attempt on a held key grants and
// revokes a lease and reads the holder's time left; queueing adds a grant
// and a transaction, and each second in the queue a read and a keep-alive.
//
// New does not close the *clientv3.Client it was given; close the Client
// first (its watches end with it), then the etcd client.
package etcdlock
