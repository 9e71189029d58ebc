// Package ops is the operator's facts about a latchkey deployment, shared
// by cmd/latchkey and package admin so that the command and the page
// always say the same thing: the held primitives (a row per primitive,
// with its holds and waiters), everything known about one key, force
// release, cronlock's last runs, httpidem's daily counts and stored
// Idempotency-Key responses, and the meaning of the release notifications
// on the wire.
//
// It reads through the public APIs of core, cronlock and httpidem only,
// never by Redis key names. Its values have JSON tags: they are the JSON
// both tools print, so a field renamed here is renamed for every script.
//
// What is not recorded anywhere is not shown. Queued waiters are counted,
// with how long the first of each queue has waited (core keeps each queued
// waiter's arrival time). Waiters are counted once they are queued in Redis: fair
// waiters (WithFair) at once, other waiters at their first retry 50 ms or
// more into the wait (a retry comes with a release, or by the holder's
// expiry and at most 5 s later); readers waiting for an RWMutex are not
// recorded at all.
package ops
