-- Delete a lease this token holds and hand the key on: to the longest-
-- waiting live waiter of W, if any (a grant, see wait_grant in
-- lib_wait.lua), else to whoever comes first (a message "r:<nonce>" on the
-- lease's channel that wakes one waiter per client). Redlock sends one
-- nonce, unique to the release, to all its nodes, and the notifier drops
-- its repeats; a single server sends "r:" alone, never dropped. A token
-- that does not hold the lease leaves W instead (a waiter giving up).
--
-- Nobody to tell: when no waiter of the default mode has marked the key
-- (M, set by each of its attempts that found the key held, acquire.lua),
-- nobody queues in W, nobody of release 0.2.0 queues in its list Q, and
-- the release is not Redlock's (its waiters leave no mark), the lease is
-- deleted and nothing published. The waiter whose attempt set M before
-- the release subscribed before its next attempt (Client.wait), so it hears
-- every release after that attempt, or finds the key free.
-- KEYS[1] lease (also the notification channel)  KEYS[2] fence counter
-- KEYS[3] the waiters W  KEYS[4] their Clients A  KEYS[5] the mark M
-- KEYS[6] release 0.2.0's queue Q  KEYS[7] the release marks
-- (lib_rel.lua) of a fenced release, or the mark key of a Redlock
-- release's nonce (see rel_seen), or none
-- ARGV[1] token  ARGV[2] claim window ms  ARGV[3] fence retention ms
-- ARGV[4] release nonce (Redlock), or ''  ARGV[5] the caller's grant
-- channel (its member of W is "<token>|<channel>")  ARGV[6] "1" if the
-- lease was taken after waiting: others likely queue, so W is looked into
-- first (no EXISTS when it has a waiter to grant to)  ARGV[7] the fence of
-- the acquisition the release ends, or '' (then any lease of the token)
-- ARGV[8] "1": only leave W (a waiter of a caller's token giving up): a
-- lease of the token is left be — another process may hold it, having
-- claimed the grant — unless it is a grant not claimed yet ("<token>|")
-- made to this waiter (its member is out of W: a grant takes it out),
-- which is passed on
-- ARGV[9] a hand-over: the lease value of a waiter of the releasing Client
-- (its fresh token, or token|metadata), or '' (none); ARGV[10] its TTL ms,
-- ARGV[11] its fence counter retention ms
-- Returns 1 released, 0 not held, {2, fence} handed over.
--
-- A hand-over: when nobody queues in W or Q, the lease is not deleted but
-- given to the waiter ARGV[9] names, as its own acquisition of the free key
-- would take it (the value, the TTL, a fresh fence), in the same script: no
-- moment between the two leases lets anyone else in, and the waiter needs
-- no call of its own. Waiters of other Clients that marked the key are not
-- told (the key was never free): as newcomers that barge, the waiter goes
-- before them, until they starve and queue in W, which this script serves
-- first. Observers of the key (they mark it) are told, on their channel.
--
-- With a fence, a lease of the token whose counter is above it was taken
-- (or re-entered, which takes a new fence) after the acquisition this
-- release ends: a late release — its bytes held up in the network, or sent
-- again by the client after a timeout — leaves it be.
-- A fenced release reads the lease and its counter in one MGET (one slot).
-- The common paths (a late release; the token's lease with nobody to
-- tell) return before the helpers only the rest uses are defined
-- (composeLua): a closure each, made on every call that reaches them.
local v, counter
if ARGV[7] and ARGV[7] ~= '' then
  local r = redis.call('MGET', KEYS[1], KEYS[2])
  v, counter = r[1], r[2]
else
  v = redis.call('GET', KEYS[1])
end
-- mine: the token holds the lease, and the call is not a waiter's leave
-- that must leave it be.
local mine = owns(v, ARGV[1]) and not (ARGV[8] == '1' and (v ~= ARGV[1] .. '|'
    or redis.call('ZSCORE', KEYS[3], ARGV[1] .. '|' .. (ARGV[5] or ''))))
if mine and counter_above(counter, ARGV[7]) then
  return 0
end
local waited = ARGV[6] == '1'
local hand = ARGV[9] and ARGV[9] ~= '' and ARGV[4] == ''
if hand and v == ARGV[9] then
  -- The lease is the one this very hand-over makes: the waiter's value
  -- holds a token that is new, unique to it, and that it has not used
  -- since (it waits for this call's outcome). This is the call sent again
  -- (its first answer was lost): the same answer again, its fence the
  -- counter's, which no acquisition has passed since (the lease is the
  -- waiter's yet). Without it, the answer "not held" would leave that
  -- lease to nobody until its TTL.
  if counter == nil then counter = redis.call('GET', KEYS[2]) end
  if counter then return {2, tonumber(counter)} end
end
if mine and ARGV[4] == '' and not waited and not hand and redis.call('EXISTS', KEYS[5], KEYS[3], KEYS[6]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
if mine and ARGV[4] ~= '' and redis.call('EXISTS', KEYS[3]) == 0 then
  -- Redlock's release, nobody queued in W (Redlock's waiters never do):
  -- what the rest does then, without making its helpers. Redlock's nodes
  -- publish classic (newRedisBackend), whichever pub this script has.
  -- A release by token, sent again, would find nothing: it leaves its
  -- mark (rel_seen, in the not-held branch).
  redis.call('DEL', KEYS[1])
  if KEYS[7] then
    redis.call('SET', KEYS[7], '1', 'PX', 15000)
  end
  redis.call('PUBLISH', KEYS[1], 'r:' .. ARGV[4])
  return 1
end
-- (the helpers only the rest uses are defined here)
-- rel_seen: did an earlier run of this call leave its mark (KEYS[7])? A
-- release with a nonce (a Redlock node's, its undo's too) has a mark key
-- of its own, "<lease>:rel:<nonce>", kept 15 s: one command per node, not
-- four; any other fenced release marks its fence in the key's marks
-- (lib_rel.lua).
local function rel_seen()
  if ARGV[4] and ARGV[4] ~= '' then return redis.call('EXISTS', KEYS[7]) == 1 end
  if ARGV[7] and ARGV[7] ~= '' then return rel_has(KEYS[7], ARGV[7]) end
  return false
end
if not mine then
  -- A fenced release that finds no lease, and the counter still at its
  -- fence: the acquisition it ends was the key's last, and its lease is
  -- gone — deleted by an earlier run of this very call whose answer was
  -- lost (go-redis sends a command again, MaxRetries), or expired with
  -- nobody taking the key since. Released, either way. ("Not held" made Do
  -- report the lease lost, for work done under it.)
  if not v and counter and ARGV[8] ~= '1' and counter == ARGV[7] then
    return 1
  end
  -- A fenced release that finds the mark of its fence: an earlier run of
  -- this very call handed the key on — a grant, or a waiter it woke took
  -- the key — before go-redis sent it again. Released, too.
  -- Redlock's release, by token on each node, marks with its nonce.
  if ARGV[8] ~= '1' and KEYS[7] and rel_seen() then
    return 1
  end
  local me = ARGV[1] .. '|' .. (ARGV[5] or '')
  -- A waiter that leaves while first in line behind a grant not yet
  -- claimed ("<token>|") was told it is next: the one behind it is now.
  local first = v and string.sub(v, -1) == '|' and redis.call('ZRANK', KEYS[3], me) == 0
  if redis.call('ZREM', KEYS[3], me) == 1 and first then
    local nxt = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    local t2, c2
    if nxt then t2, c2 = wait_split(nxt) end
    if t2 then pub_to(KEYS[1], c2, 'n:' .. t2 .. '|' .. KEYS[1]) end
  end
  return 0
end
if hand and redis.call('EXISTS', KEYS[3], KEYS[6]) == 0 then
  redis.call('SET', KEYS[1], ARGV[9], 'PX', ARGV[10])
  local f = fresh_fence(KEYS[2], ARGV[11])
  if redis.call('EXISTS', KEYS[5]) == 1 then
    -- Observers (Client.Observe) mark the key too: a new holder.
    pub(KEYS[1] .. ':o', 'l:')
  end
  return {2, f}
end
-- From here on the key goes to a waiter, or one may take it at once: a
-- fenced release leaves its mark (KEYS[7], lib_rel.lua), for a run of it
-- sent again (see the not-held branch above).
local function mark()
  if not KEYS[7] then return end
  if ARGV[4] and ARGV[4] ~= '' then
    redis.call('SET', KEYS[7], '1', 'PX', 15000)
  elseif ARGV[7] and ARGV[7] ~= '' then
    rel_add(KEYS[7], ARGV[7])
  end
end
if wait_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3]) then
  mark()
  return 1
end
if ARGV[4] == '' and waited and redis.call('EXISTS', KEYS[5], KEYS[6]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('DEL', KEYS[1])
mark()
pub(KEYS[1], 'r:' .. ARGV[4])
return 1
