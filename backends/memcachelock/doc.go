// Package memcachelock runs latchkey's lock on memcached, for a service
// that has a memcached and no Redis or database to spare. New returns a
// *core.Client: Lock, TryLock, Do, Campaign, Observe, LockAll, Inspect
// and Records work as on Redis, and cronlock runs on it (see "Records and
// claims" for its clock). memcached is a cache — it may drop a lease before its
// time — so read "Loss" below before you rely on it, and write through
// fences.
//
//	mc := memcache.New("10.0.0.5:11211")
//	mc.MaxIdleConns = 32
//	locks, err := memcachelock.New(mc)
//	…
//	err = locks.Do(ctx, "nightly-report", run)
//
// # How it works
//
// Each lock key has two items, named by the namespace (WithNamespace) and
// the SHA-256 of the key (lock names may be longer than memcached's 250
// bytes and hold any byte): the lease, whose value is the holder's token,
// metadata and fence, and a fence counter. gomemcache's Get is memcached's
// gets, so every read comes with the item's CAS value.
//
//   - Acquire adds the lease item (add: only if there is none) with the
//     lease's expiry, reads it back, increments the counter (incr) and
//     writes the fence into the item with a compare-and-swap (cas) against
//     the item as read. The fence is thus drawn while the item is the
//     caller's — after every earlier holder's item was gone and before any
//     later one's can be added — and the swap fails, and the attempt starts
//     over, if the item changed or vanished meanwhile. A re-entry (the
//     holder's token) is a cas that keeps the fence. Four round trips to
//     take a free key, two to find it held.
//   - Extend reads the item, checks the token and rewrites it with a cas:
//     a late Extend of a deposed holder finds another token, or loses the
//     swap, and changes nothing. It reports the TTL asked for as the time
//     left (the least the item is kept; memcached does not say more).
//   - Release reads the item, checks the token, and writes it back with a
//     cas and a negative expiry, which memcached takes as "expired now": a
//     compare-and-delete (memcached's delete takes no CAS value, so it is
//     never used). A deposed holder's late Release cannot delete its
//     successor's lease: the token differs, or the swap fails.
//   - Expiry is memcached's: a lease is held while its item exists, and an
//     item is gone when memcached's clock passes its expiry. memcached
//     counts whole seconds, on a counter that a timer advances once a
//     second: an item stored for E seconds can be gone after just over E-2
//     real seconds (the counter may be almost two ticks behind when it is
//     stored), and is gone by E. So a lease of TTL t is stored for
//     ceil(t + 2.1 s) seconds: memcached keeps it at least t after it got
//     the write (the rule the Client relies on), and up to about t + 3 s.
//     A lease whose holder crashed or was cut off therefore blocks the key
//     for up to three seconds longer than its TTL; a released one is free
//     at once. Expiries are always relative (30 days at most; a longer TTL
//     is an error): memcached reads larger numbers as unix times, judged by
//     its wall clock, which nothing here can see.
//   - Never shorter: an Extend or re-entry asks memcached for the longer of
//     its own expiry and the one the item was last written with, so a
//     shorter TTL never cuts a lease. (The price: a lease once extended
//     for an hour keeps being stored for an hour at every renewal.)
//   - Waiting: there are no release notifications between processes.
//     Waiters in other processes poll, from 4 ms doubling up to 250 ms,
//     jittered, and do not sleep past the holder's expected end; a release
//     in the same process wakes its waiters at once. The holder's expected
//     end (Inspect's TTL, and the bound on a waiter's sleep) comes from the
//     writer's clock and is an estimate: decisions are memcached's alone.
//   - No fairness: waiters compete at every attempt; WithFair is
//     core.ErrUnsupported.
//
// # Fences
//
// The counter item has no expiry, but memcached may evict it (memory
// pressure), and a restart or flush_all empties memcached. A counter found
// missing is added again with the clock of the client that draws the next
// fence, in microseconds (or just above the highest fence that Client
// issued, if that is higher). Fences therefore rise strictly per key, also
// across a lost counter, as long as that clock reading is above the last
// fence the lost counter gave out. The counter started from some client's
// clock reading and gained one per acquisition: the reading is above it
// when the time since that seeding, in µs, exceeds the number of
// acquisitions since (memcached allows nowhere near one per microsecond on
// a key) plus the amount by which the seeding client's clock ran ahead of
// the reseeding one's. In practice: keep the clients' clocks synchronized
// (NTP), and never step one back. The fences are not the lease: the lease
// is memcached's, and a storage that rejects writes below the highest fence
// it has seen stays consistent even when memcached forgets a lease.
//
// # Loss
//
// memcached can drop a lease that is held: a restart, a flush_all, or an
// eviction (memcached evicts items under memory pressure, before they
// expire, unless it runs with -M). Then the key is free at once, and
// another process can take it before the holder knows — the holder is
// told (Lost, ErrLost, the Do callback's context cancelled) only at its
// next renewal, which finds the item gone; until then two processes
// believe they hold the key. This breaks the promise the Client makes on
// Redis (told no later than anyone else can take the key), and nothing in
// memcached can keep it: use fences for anything that must not be done
// twice, run a memcached of its own for the locks (or -M, so that a full
// memcached refuses new leases instead of dropping held ones), and renew
// often (the Client renews at a third of the TTL by default). The new
// holder's fence is above the old one's (see Fences).
//
// Route each key to one memcached: a single server, or a server list that
// is the same in every client and never changes while locks are held.
// gomemcache picks a key's server by a hash of its name over the list;
// change the list, and a key moves to a server where its lease is not —
// the same as a restart.
//
// # Clocks
//
// A lease ends by memcached's seconds counter (monotonic where memcached
// is built with it, so a step of its host's wall clock does not move
// expiries). The Client believes a lease for its TTL from when it sent the
// request, less the drift margin (core.WithDriftMargin), which must cover
// the rate difference between its clock and memcached's over a TTL. Client
// clocks matter for fences seeded after a lost counter (see Fences), for
// estimates (Inspect's TTL, a waiter's sleep), and for the lateness of a
// claim (below: they must stay within WithClockSkew of each other).
//
// # Records and claims
//
// Client.Records (core.CapClaims), and so cronlock, work on memcached. A
// record is an item of its own, "<namespace><hash>:r", beside the lease
// and fence items of the same name. Set is memcached's set, Claim its add
// (stored only if there is no item), SetIfNewer a read and a
// compare-and-swap (cas) against the item read. A record ends by
// memcached's expiry, rounded up as a lease's is: at least its TTL after
// memcached got the write, and about three seconds more at most. A record
// longer than memcached's 30 days of relative expiries is given an
// absolute expiry from the writer's clock.
//
// Records.ClaimWithin — cronlock's claim of a tick — must refuse a claim
// that arrives after planned + window, judged by the store's clock.
// memcached has no clock a write can be judged by (its clock shows only in
// stats, in whole seconds, in a round trip of its own), so a claim is
// judged by the claiming Client's clock, and is kept long enough that this
// is safe. The claimer reads its clock before the add and again after
// memcached answered it:
//
//   - before the add, past the deadline: late, nothing is stored (or
//     taken, if a claim is there);
//   - the add is kept by memcached until at least skew past the deadline,
//     counted from the first reading (and at least its TTL);
//   - after the add, past the deadline: the add may have reached memcached
//     late; the claim is taken back (a cas to an expiry in the past, of
//     this claim's item only) and the answer is late.
//
// skew is WithClockSkew (DefaultClockSkew, one second): the most any two
// Clients' clocks differ, including how far their rates differ from
// memcached's over a claim's life. If it holds, one claim per tick
// succeeds: a second add can succeed only once the first item is gone,
// that is later than skew past the deadline by the first claimer's clock,
// so later than the deadline by the second claimer's clock — which it
// reads after its add, and finds late. A clock further off than skew can
// let a tick run twice; a clock stepped forward makes claims late (a tick
// is skipped), never doubled. A claim taken back after a late answer may
// have turned others away meanwhile, leaving the tick unrun: at most once.
//
// Eviction: memcached may drop a record before its expiry (memory pressure
// without -M, a restart, flush_all). A claim it dropped is forgotten: a
// node that claims the same tick afterwards, still in time, runs it again.
// cronlock's once-per-tick holds on memcached only while memcached keeps
// its claims — give it the memory, or -M, or a memcached of its own.
//
// # Not offered
//
// Fair queueing (WithFair), release notifications between processes,
// Scan and Records.Scan (memcached cannot list its keys), semaphores and
// read-write locks: core says core.ErrUnsupported, and adapters that need
// them refuse at start-up. Evict is not offered, and neither is
// core.WithReplicaAck (memcached does not replicate).
//
// gomemcache takes no context: a call is bounded by the memcache.Client's
// Timeout (default 500 ms), and a context is checked between round trips
// only.
package memcachelock
