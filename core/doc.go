// Package core is a distributed lock that never lets two holders believe
// they hold the same key at once without one of them being told — and that
// gives storage the fencing token it needs to reject the one that was late.
//
// A lock is a lease on a key: (key, token, fence, expiry).
//
//   - The token is 128 random bits; extend and release are compare-and-set
//     on it in one Lua script, so nobody releases or extends a lease they do
//     not hold (ErrNotHeld), and a stale handle never disturbs the new owner.
//   - The fence strictly increases with every acquisition of the key, across
//     clients, processes and restarts or failovers of a Redis that lost
//     data, all of it or only the latest writes (a fence is one above the
//     key's counter and never below the server clock in microseconds; the
//     counter lives five minutes from the last acquisition, and never less
//     than the key's lease, so a released key leaves nothing in Redis after
//     five minutes, or its lease's TTL and a minute if longer; this assumes
//     the server's clock never steps back by five minutes or more, nor,
//     across a restart or failover, by more than the time it took). Pass it with
//     every protected write and let storage reject lower fences: a holder
//     that paused past its TTL (GC, swap, a slow network) then cannot
//     overwrite its successor.
//   - A holder is told no later than anyone else can take its key. Each
//     lease has a belief deadline: the send time of the last write the
//     server confirmed (acquisition, renewal, Extend) plus the time the
//     server said the lease then had left, minus a drift margin
//     (WithDriftMargin; by default 1% of that time plus 2 ms, at most a
//     tenth of it). A timer of the lease's own (started with its first
//     renewal, a third of the TTL in) closes Lock.Lost at that deadline — and under Client.Do cancels the callback's context with a
//     cause matching ErrLost — whatever any I/O, other lease or Close is
//     doing. Lock.Err, Lock.Lost and the Err of Do's context also look at
//     the deadline when called, so a timer the runtime runs late does not
//     stretch the belief of a holder that asks. The server counted the same time from a later instant, so the
//     promise holds unless the holder's clock runs slower than the margin
//     allows, or its process is paused for longer than the margin.
//   - Leases are renewed every ttl/3 (WithAutoRenew). Renewals never wait on
//     each other: they run in concurrent batches, one per Cluster master
//     (the leases of a batch on one server, or one Cluster slot, renewed by
//     one script call),
//     and a renewal that fails or gets no answer within a third of its
//     lease's remaining time is retried (in a batch of such retries, each
//     given up on in its own time; alone when the server refused it with
//     an error reply about the call). No renewal, Extend or
//     re-entry ever shortens a lease: an expiry only moves forward. A lease
//     that renewal finds gone, or that reaches its deadline, is lost.
//   - Waiting is push, not poll: the release script publishes on the key's
//     channel, one subscription per Client serves all its waiters, and each
//     release wakes one waiter of each Client. A release that nobody waits
//     for publishes nothing: a waiter's every attempt that finds the key
//     held marks it as waited for (for 10 s, twice a waiter's longest
//     sleep), and a release publishes only while the mark or a queue of
//     waiters exists; an Observe call marks the key it watches too. While waiters queue (below),
//     a release grants the key to the queue's head and tells only that
//     waiter's Client, on a channel of its own: one handoff wakes one
//     process, however many wait; the waiter next in line is told too, so
//     that if the head never claims its grant (it died), the next takes the
//     key once the grant's one-second claim window has passed (if that
//     waiter's process died too, the waiters behind it find the key at
//     their next call, below: the short life of a pending grant does not
//     set their pace). A Client
//     keeps all its queued waiters of a key in place with one short call
//     about every 10 s, which also finds a grant whose message was lost;
//     the waiters of a process that stopped making it are skipped once
//     its 30 s have lapsed and another Client's call has noticed. A key found free while waiters queue (its holder expired) is
//     granted to the head by whoever finds it so. A waiter whose
//     notification went missing
//     retries no later than the holder's expiry, and at most a few seconds
//     later. Every wait ends: with ctx, WithWaitTimeout or
//     WithRetryBudget. No waiter starves: a waiter that has waited 50 ms
//     joins the key's fair queue (as WithFair waiters do from the start),
//     and the key is then handed over in arrival order until the queue
//     drains (not on Redlock, which has no queue: there a Client's Lock
//     callers of a key take turns, one asking the nodes at a time, in
//     arrival order).
//   - A release hands the key over to a waiter of its own Client (Redis,
//     a mutex, no replica acknowledgement): when that Client has a Lock or
//     Do caller of the key asleep between attempts, in the default mode
//     and with a token of its own, and nobody queues for the key, the
//     release script makes the lease that waiter's — its value, its TTL, a
//     fence of its own above the releaser's — instead of deleting it. The
//     key is never free between the two holders, the waiter makes no call
//     and is told in-process (its lease reckoned from when the release was
//     sent), and the longest-waiting such caller goes first. Waiters of
//     other Clients are not woken: the key passes on as it would to a
//     newcomer that barges in, until they have waited 50 ms and queue
//     (above), which the release then serves first; observers (Observe)
//     are told. A waiter that gives up while a release is handing it the
//     key has the lease given back by the releaser; if the release's
//     answer is lost (the release then fails with ErrUnavailable, as any),
//     the waiter gives back whatever its token holds and waits on with a
//     new token.
//   - With WithShardedNotify, notifications use sharded pub/sub (SPUBLISH,
//     SSUBSCRIBE; Redis 7 and later): on a Cluster each stays on the master
//     of its key's slot instead of crossing the cluster bus to every
//     master, and a Client holds one subscription connection per master it
//     waits on, moved when a slot moves. Every Client sharing keys must
//     notify the same way; a server without sharded pub/sub gets classic
//     pub/sub.
//   - On a Redis server or Sentinel group (not a Cluster), and on each
//     Redlock node, acquisitions and releases that a Client's goroutines
//     make at the same time share round trips: while three are under way,
//     the next ones queue and go out together, in one pipeline, when one
//     of them returns. A lone call waits for nobody. Hooks on the go-redis
//     client see those in ProcessPipelineHook, with the context of the
//     batch's first caller (its trace span, its values). The commands of
//     a batch's callers with a deadline go out together, bounded by the
//     latest of their deadlines (at least 20 ms), and those of callers
//     without one after them, unbounded, so that neither bounds nor
//     unbounds the other's wait; a caller whose command went out waits
//     for its answer even past its own deadline (a lease's expiry is still
//     reckoned from before the call). A queued acquisition whose context
//     ends before it was sent is never sent; a queued release then goes
//     out on a connection of its own, and Release waits for it, bounded
//     again as any release is.
//   - Release runs even on a cancelled context, so a cancelled request never
//     strands a lease until its TTL.
//   - A context from Do (or Lock.WithContext) carries the lease: nested lock
//     calls of the same key on the same Client re-enter it instead of
//     deadlocking. WithToken re-enters a lease across processes.
//
// Keys in Redis are "<prefix>:{<key>}" (the lease, whose value is the
// token) and "<prefix>:{<key>}:fence" (the counter); they share a hash tag,
// so the scripts run on a Redis Cluster. The release channel is named like
// the lease key. The key rule: 1 to MaxKeyLen bytes, any bytes, not
// starting with '}' (Cluster ends a hash tag at the first '}', and a leading
// one would leave it empty); anything else is ErrInvalidKey.
//
// Client.Semaphore hands out up to N permits of a key at once (a
// cluster-wide concurrency limit); each permit is a *Lock with the same
// guarantees, kept in "<prefix>:{<key>}:sem" (a sorted set of tokens by
// expiry) beside its own fence counter.
//
// Client.RWMutex is a read-write lock whose waiting writers hold new
// readers back. Client.LockAll takes several keys at once, all or none, in sorted order
// so that callers never deadlock.
//
// Client.Campaign and Client.Observe elect a leader: Campaign is Lock with
// the leader's announcement as metadata (resign with Release; leadership
// lost is Lost), and Observe streams who leads, including nobody.
//
// Other stores: New runs the Client on any Backend — the leases of a key
// and their fences, answered atomically per key — and the Client adds
// tokens, renewal, the loss signal, waiting and bounds. What a backend
// may lack is a Capability (fair queueing, notifications, replica
// acknowledgement, listing, claims, primitives): a call that needs one it
// lacks fails with ErrUnsupported, and adapters check with Client.Require
// when they are built. "Writing a backend" in Backend's documentation
// gives the four rules a backend must keep; core/locktest proves them.
// The backends directory holds SQL (backends/sqllock) and others, each a
// module of its own.
//
// What a lock cannot do: a lease is a timeout, so a holder that stalls past
// its TTL without noticing is not stopped by the lock — only by fencing at
// the storage that receives its writes. Use Lock.Fence.
package core
