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
//     clients, processes and restarts of a Redis that lost its data (the
//     counter is seeded from the server clock in microseconds). Pass it with
//     every protected write and let storage reject lower fences: a holder
//     that paused past its TTL (GC, swap, a slow network) then cannot
//     overwrite its successor.
//   - Leases are renewed every ttl/3 by one watchdog goroutine per Client
//     (WithAutoRenew). A lease that renewal finds gone, or cannot renew
//     before it expires, is lost: Lock.Lost closes, and under Client.Do the
//     callback's context is cancelled with a cause matching ErrLost.
//   - Waiting is push, not poll: the release script publishes on the key's
//     channel, one subscription per Client serves all its waiters, and each
//     release wakes one waiter of each Client. A waiter whose notification
//     went missing retries no later than the holder's expiry, and at most a
//     few seconds later. Every wait ends: with ctx, WithWaitTimeout or
//     WithRetryBudget.
//   - Release runs even on a cancelled context, so a cancelled request never
//     strands a lease until its TTL.
//   - A context from Do (or Lock.WithContext) carries the lease: nested lock
//     calls of the same key on the same Client re-enter it instead of
//     deadlocking. WithToken re-enters a lease across processes.
//
// Keys in Redis are "<prefix>:{<key>}" (the lease, whose value is the
// token) and "<prefix>:{<key>}:fence" (the counter); they share a hash tag,
// so the scripts run on a Redis Cluster. The release channel is named like
// the lease key.
//
// What a lock cannot do: a lease is a timeout, so a holder that stalls past
// its TTL without noticing is not stopped by the lock — only by fencing at
// the storage that receives its writes. Use Lock.Fence.
package core
