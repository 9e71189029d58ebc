// Package zklock runs latchkey's lock on ZooKeeper — the seeds' recipe of
// ephemeral sequential znodes — for a service that has a ZooKeeper
// ensemble and no Redis. New returns a *core.Client: Lock, TryLock, Do,
// WithFair, Campaign, Observe, LockAll, Inspect and Records work as on
// Redis, and cronlock runs on it (see "Records and claims" for its clock).
//
//	conn, _, err := zk.Connect(servers, 30*time.Second)
//	…
//	locks, err := zklock.New(conn, zklock.WithSessionTimeout(30*time.Second))
//	…
//	err = locks.Do(ctx, "nightly-report", run)
//
// # How it works
//
// Each key is a container znode under the root (DefaultRoot, or
// WithRoot), named after the key with '/', '%' and bytes outside
// printable ASCII escaped; the server deletes it once it is empty. A
// contender creates an ephemeral sequential child "<token>-<sequence>"
// holding its metadata; the child with the lowest sequence holds the
// lock. The token in the name lets any call of that token find its node
// again — also a node whose creation answered with an error.
//
//   - Acquisition: a caller that finds the key held and is not fair gets
//     ErrNotAcquired without writing anything. Otherwise it creates its
//     node and lists the children: lowest, it holds the key; else a fair
//     caller keeps its node and is queued, and any other deletes it. The
//     listing comes from the server that created the node, which has
//     every node created before it, so a lower node it does not show was
//     deleted: no sync is needed. A decision about a node created
//     earlier — a queued waiter's turn, a re-entry by token — is made
//     after a sync, on the leader's state.
//   - Fences are the holder node's czxid, the zxid of the transaction
//     that created it. Zxids rise strictly across the ensemble: the leader
//     orders every write, the low 32 bits count the writes of one
//     leader's epoch, the high 32 bits are the epoch, which every newly
//     elected leader raises. The holders of a key are its nodes in
//     sequence order (a node that holds stays lowest until deleted, and a
//     later node is created later), so each holder's fence is above every
//     earlier one — also across releases, expiries, restarts and
//     elections, and after the server deleted the empty key node.
//     Inspect reports a free key's fence as the key node's pzxid (or the
//     root's once the key node is gone): at least the last fence issued,
//     below the next.
//   - Fairness: sequence order is arrival order. A fair waiter keeps its
//     node while it waits and is served when its node is lowest; one that
//     gives up deletes its node. A fair TryLock (core.AcquireRequest
//     without Enqueue) takes the key only when nobody holds or queues,
//     and never leaves a node behind. The reaper (below) deletes a queued
//     node of this process whose waiter stopped asking for ten seconds.
//   - Notifications: each Client watches, per key its waiters wait for,
//     one znode: its own first queued node's predecessor — so a release
//     wakes the next in line, never the herd — or, with no queued node,
//     the holder's. When the watch fires it lists the key; a release
//     hands the key to this process's queued waiter by its token, or
//     wakes a waiter. Watches survive reconnections; a notification lost
//     with a session costs a waiter at most the time until it asks again
//     by itself (a second when queued).
//
// # Leases and the session
//
// An ephemeral znode lives as long as the session that created it, and
// the session expires on the server when the server has not heard from
// the client for the session timeout — a timeout the server judges by its
// own clock, and that the client renews by every request and by pings
// every third of it. A lease is therefore not a TTL the client sets on the
// server. It is mapped onto the session so that the holder never
// believes it longer than ZooKeeper keeps the node (core's rule 1):
//
//   - The session vouches for two thirds of its timeout T from the moment
//     a request was sent, when the server answered it with the session
//     alive: the leader heard of the session no earlier than the client's
//     last ping, at most T/3 before (on a standalone server or the leader
//     itself, the request itself counts: T). A TTL longer than 2T/3 is
//     refused (core.ErrInvalidTTL), and the Client's default TTL is
//     lowered to it when core.DefaultTTL is longer.
//   - Extend syncs the connected server with the leader, then reads the
//     node: if it is gone, or belongs to a session other than the one
//     that created it, the lease is lost (core.ErrNotHeld: Lost closes at
//     once); if the read fails, the Client keeps believing the lease only
//     until its deadline. Extend returns at most 2T/3, counted by the
//     Client from before the call.
//   - The TTL still ends leases nobody renews: this process's reaper
//     deletes a held node once its TTL passed without an extension, by
//     this process's clock, after the holder's own belief ended (the
//     Client believes ttl from before its request, less the drift margin;
//     the reaper counts from after the answer). Re-entry by token keeps
//     the node, its fence and the later of the two deadlines.
//   - A session lost — expired while the client was cut off, or the
//     zk.Conn closed — takes its nodes with it. The holder's Extend then
//     says ErrNotHeld, or fails until the deadline, which ends no later
//     than the server's expiry; Lost closes, and the next node's watcher
//     hands the key on.
//
// Clocks: the session's expiry is judged by the server; records by the
// leader's stamps (see Records and claims); the TTL of an unrenewed lease
// by the holder's own clock (it only shortens what the
// session allows). The assumptions are those of every lease: clocks run at
// about the same rate (the drift margin), and a process paused longer than
// its TTL learns of the loss when it resumes — use the fence.
//
// # Records and claims
//
// Client.Records (core.CapClaims), and so cronlock, work on ZooKeeper. A
// record is a persistent znode under <root>/.records (lock nodes never
// begin with '.', so the two never meet), named after the record as a
// lock node is, holding the value, its TTL and, for a claim, its
// deadline. Persistent: a claim outlives the session, and the node, that
// wrote it.
//
// The clock is the time ZooKeeper stamps on writes. The leader stamps
// every transaction it proposes with its wall clock, and every server
// stores that stamp as the znode's mtime (ctime at its creation): one
// clock for the ensemble, the leader's, read in the same atomic step as
// the write. A record lives until its write's mtime plus its TTL (a
// claim: or until just past its deadline, whichever is later). To know
// the time now, a record call writes: it rewrites the data of
// <root>/.records/.clock and reads the mtime of that write. So:
//
//   - Claim creates the znode (create fails if it exists) in a
//     transaction that also returns the write's stamp. On an existing
//     znode it reads the record and the time; a live record is a claim
//     taken; an expired one is rewritten, conditional on the version judged
//     expired.
//   - ClaimWithin judges the claim by the stamp of its own write: stamped
//     after planned + window, the record is void — read as no record by
//     everyone — and is deleted, and the answer is late. A claim in time
//     lives until just past the deadline at least, so every claim stamped
//     by then finds it, and any later write is stamped later: one claim
//     per tick succeeds, however long a request was delayed on the way.
//   - Get reads the record and the time (a read costs a write); Set writes
//     unconditionally; SetIfNewer rewrites conditional on the version read.
//   - Deletions — of a void claim, and by the sweep that each Client runs
//     at its first record write after a minute, removing the expired
//     records (it lists them at once, and looks at 1000 at most) — bump a generation znode, <root>/.records/.gen, and every
//     conditional rewrite checks it in the same transaction: a znode
//     deleted and made again starts at version 0 again, and the check
//     keeps a version read before from naming the new one.
//
// The assumption is that the stamps do not go backwards. Within one
// leader they follow its wall clock: keep it synchronized (NTP slewing,
// not stepping). A new leader stamps with its own clock: if it is behind
// the old one's by Δ, records live Δ longer — safe — unless Δ exceeds a
// claim's lifetime past its deadline (for cronlock, the tick interval), in
// which case a claim that expired under the old leader's clock can be
// replaced by a write the new one stamps before the deadline, and the tick
// runs twice. A new leader's clock ahead by Δ shortens every record by Δ
// (a record set for a TTL may be gone early), and may make claims late (a
// tick is skipped), never doubled. Keep the ensemble's clocks within a
// tick interval of each other; within seconds is usual.
//
// Costs: a claim on a free key is a read and a write (two ops in one
// transaction); on a taken key a read, a write and a read; Get a read and
// a write. Records are not listed (Records.Scan): see below.
//
// # Not offered
//
// Listing (Client.Scan, Records.Scan):
// ZooKeeper lists children all at once, so memory would grow with the
// number of keys. Semaphores and read-write locks (core does not offer them
// to backends of New yet). Core says ErrUnsupported for each.
//
// Limits: WithSessionTimeout must be what the server granted (the client
// library does not tell it): ask within the server's minSessionTimeout and
// maxSessionTimeout. A token's lease lives in the session that created
// it: re-entering it by token from another session (WithToken in another
// process) is refused with an error rather than vouched for, and another
// session's node under the token, held or queued, is never adopted nor
// deleted from this one (a TryLock or a waiter that gives up leaves it to
// its owner). ZooKeeper
// sequence numbers are 32-bit per key node: a key node that is never
// empty wraps after 2^31 acquisitions. Waiters and OldestWait come from
// the queued nodes (OldestWait from the server's ctime, read by the local
// clock); Inspect's TTL is the remaining TTL for a lease of this process
// and -1 (unknown) for another's.
package zklock
