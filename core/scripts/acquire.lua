-- Acquire a lease, or re-enter one held with the same token. A caller
-- that will wait (KEYS[3] and ARGV[6..] given) and finds waiters queued
-- joins them at once, as a starving waiter does: the key is handed over
-- in arrival order while they queue, so nobody arriving later goes before
-- them (see lib_wait.lua).
-- KEYS[1] lease "<prefix>:{key}"   KEYS[2] fence counter "<prefix>:{key}:fence"
-- KEYS[3] the waiters W "<prefix>:{key}:w", KEYS[4] their Clients A
-- "<prefix>:{key}:w:a", KEYS[5] the mark M "<prefix>:{key}:w:m" (a
-- waiting caller only)
-- ARGV[1] token   ARGV[2] lease value (token, or token|metadata)
-- ARGV[3] ttl ms  ARGV[4] fence counter retention ms
-- ARGV[5] "1" if the token is new (nobody can hold with it: no re-entry
-- read), else ''
-- A waiting caller only: ARGV[6] queue entry ttl ms, ARGV[7] the caller's
-- grant channel, ARGV[8] "1" to (re)enter its Client in A, ARGV[9] the
-- mark's ttl ms
-- Returns {1, fence} acquired (or a grant to the token claimed), {2, fence}
-- re-entered, {0, holder pttl ms} held, {3, holder pttl ms} held and
-- queued ({3, -1} when the key is granted to an earlier waiter that has
-- not claimed it yet).
local set, held = set_nx(KEYS[1], ARGV[2], ARGV[3])
if set then
  return {1, fresh_fence(KEYS[2], ARGV[4])}
end
-- (the helpers only the rest uses are defined here)
if ARGV[5] ~= '1' and owns(held, ARGV[1]) then
  -- Re-entry never shortens the lease its other holders were promised.
  local left = redis.call('PTTL', KEYS[1])
  if held == ARGV[1] .. '|' then
    -- The claim of a grant to the token (lib_wait.lua), which nobody
    -- holds yet: an acquisition. The lease takes the caller's value, so
    -- that it no longer reads as a grant not claimed (release.lua passes
    -- such a grant on).
    redis.call('SET', KEYS[1], ARGV[2], 'PX', math.max(left, tonumber(ARGV[3])))
    if KEYS[3] then
      -- The grant may have gone to another waiter of the token (another
      -- process): the claimer's own member leaves W too.
      redis.call('ZREM', KEYS[3], ARGV[1] .. '|' .. ARGV[7])
    end
    return {1, next_fence(KEYS[2], ARGV[4])}
  end
  if left < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  -- A new fence, as for any acquisition: the lease may be one a restart
  -- brought back, its counter with it, after fences handed out since.
  return {2, reentry_fence(KEYS[2], ARGV[4], KEYS[1])}
end
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  local a = nil
  if ARGV[8] == '1' then a = KEYS[4] end
  wait_join(KEYS[3], ARGV[1] .. '|' .. ARGV[7], a, ARGV[7], tonumber(ARGV[6]))
  if string.sub(held, -1) == '|' then
    -- A grant not claimed yet, its claim window short: not a time to look
    -- again. Others queue ahead of the caller, and the first of them was
    -- told it is next (lib_wait.lua): it looks if the grant lapses. The
    -- caller keeps its usual pace (-1: no holder's expiry to time it to).
    return {3, -1}
  end
  return {3, redis.call('PTTL', KEYS[1])}
end
if KEYS[5] then
  -- The caller will wait for the release: the release is to publish (see
  -- release.lua). Each attempt of the waiter sets the mark again, and it
  -- outlives the waiter's sleep between two of them.
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[9])
end
return {0, redis.call('PTTL', KEYS[1])}
