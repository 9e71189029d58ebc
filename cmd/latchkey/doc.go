// Command latchkey shows and acts on the locks of a latchkey deployment:
// who holds a key, since when its lease runs, who waits; force release of
// a stuck holder; a live stream of releases and grants; cronlock's last
// runs; httpidem's daily counts and stored Idempotency-Key responses.
//
// Install it with
//
//	go install github.com/latchkey/latchkey/cmd/latchkey@latest
//
// Usage:
//
//	latchkey locks   [--match GLOB]           held locks, semaphores and read-write locks
//	latchkey inspect KEY                      everything known about one key
//	latchkey release --force [--yes] KEY      take every hold of KEY away, raising its fences
//	latchkey watch   [--keyspace auto|on|off]  releases, grants, leaders as they happen
//	latchkey cron    [JOB]                    the last run of every cronlock job, or of JOB
//	latchkey daily   SCOPE OBJECT [--day D]   httpidem's count of SCOPE and OBJECT on a day
//	latchkey idem    KEY --principal P [--delete [--yes]]
//	                                          a stored Idempotency-Key response
//
// Every subcommand takes:
//
//	--redis URL    the Redis to use (default $REDIS_URL, else redis://127.0.0.1:6379/0):
//	               redis://, rediss:// and unix:// for a server; with
//	               ?master_name=NAME, or redis+sentinel://, a Sentinel group
//	               (host:port is a sentinel's, more with &addr=); redis+cluster://
//	               or rediss+cluster:// a Cluster (more seed nodes with ?addr=)
//	--prefix P     the key prefix (default "latchkey", as core.DefaultKeyPrefix;
//	               for daily and idem "latchkey:http", as httpidem.DefaultKeyPrefix)
//	--json         JSON instead of a table: an array streamed as it is read,
//	               one object for a single answer, one object per line for watch
//	--timeout D    how long the command may take (default 30s; not watch)
//
// Flags may come before or after the arguments; put "--" before a key
// that starts with '-'. Exit codes: 0 ok, 1 an operational error (Redis
// unreachable, a confirmation declined), 2 a usage error or bad input (an
// invalid key, pattern, day or URL: nothing is read or written), 3 not
// found or not held. Every error names its cause on standard error.
//
// A force release (latchkey release --force) deletes the key's leases and
// raises its fences: storage that checks fences rejects the evicted
// holder's late writes from then on, and the holder itself is told (its
// Lost channel closes, Do's context is cancelled) at its next renewal,
// within a third of its TTL. It asks for confirmation on standard input
// unless --yes is given, and prints what it did. It takes only the holds
// it showed: a holder that took the key since is left be.
//
// watch sees what core publishes: releases (and force releases), grants to
// fair waiters and leaders announced by Campaign. Acquisitions and
// expiries publish nothing; it shows them too when the server sends
// keyspace notifications (notify-keyspace-events including K, $ and x, or
// A). A holder's loss is decided in the holder's process and is never
// visible from outside. A fleet on core.WithShardedNotify publishes with
// SPUBLISH, which takes no pattern subscription: watch sees none of its
// releases, grants or leaders, only what keyspace notifications show
// (--keyspace on). release --force wakes waiters both ways.
package main
