-- Acquire a lease in arrival order (fair mode), claim a lease granted to
-- this token, or join the waiters (see lib_wait.lua).
-- KEYS[1] lease  KEYS[2] fence counter  KEYS[3] the waiters W  KEYS[4]
-- their Clients A
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence retention ms
-- ARGV[5] queue entry ttl ms  ARGV[6] "1" to join the waiters when not served
-- ARGV[7] the caller's grant channel  ARGV[8] "1" to (re)enter its
-- Client in A when joining  ARGV[9] claim window ms
-- Returns {1, fence} acquired (or a grant claimed), {2, fence} re-entered,
-- {0, holder pttl ms} held (or, free, just granted to an earlier waiter).
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] .. '|' then
  -- The claim of a grant (which took the token out of W). Nobody else
  -- holds with this token, so the lease may get shorter than the grant.
  -- The grant may have gone to another waiter of the token (another
  -- process): the claimer's own member leaves W too.
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[1] .. '|' .. ARGV[7])
  -- A new fence, as for any acquisition (the grant may be one a restart
  -- brought back, its counter with it, after fences handed out since).
  -- Nobody held the grant: an acquisition, not a re-entry.
  return {1, next_fence(KEYS[2], ARGV[4])}
end
local me = ARGV[1] .. '|' .. ARGV[7]

local function enqueue()
  if ARGV[6] ~= '1' then return end
  local a = nil
  if ARGV[8] == '1' then a = KEYS[4] end
  wait_join(KEYS[3], me, a, ARGV[7], tonumber(ARGV[5]))
  redis.call('PEXPIRE', KEYS[3], 2 * tonumber(ARGV[5]))
end

if v then
  if owns(v, ARGV[1]) then
    -- A re-entry: never shorter than it was.
    redis.call('SET', KEYS[1], ARGV[2], 'PX', math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[3])))
    redis.call('ZREM', KEYS[3], me)
    -- A new fence, as for any acquisition (see acquire.lua).
    return {2, reentry_fence(KEYS[2], ARGV[4], KEYS[1])}
  end
  enqueue()
  return {0, redis.call('PTTL', KEYS[1])}
end
-- Free: it goes to the longest-waiting live waiter. The caller takes it if
-- that is the caller (or nobody waits); else it grants it to that waiter,
-- as the release that did not come (a holder that expired, a grant not
-- claimed) would have.
if wait_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[9], ARGV[4], me) == 'granted' then
  enqueue()
  return {0, tonumber(ARGV[9])}
end
local f = next_fence(KEYS[2], ARGV[4])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, f}
