-- Acquire a lease, or re-enter one held with the same token. A caller
-- that will wait (KEYS[3], KEYS[4] and ARGV[5] given) and finds waiters
-- queued joins the queue at once, as a starving waiter does: the key is
-- handed over in arrival order while they queue, so nobody arriving later
-- goes before them.
-- KEYS[1] lease "<prefix>:{key}"   KEYS[2] fence counter "<prefix>:{key}:fence"
-- KEYS[3] fair queue  KEYS[4] its entry deadlines  KEYS[5] its arrival
-- times (a waiting caller only)
-- ARGV[1] token   ARGV[2] lease value (token, or token|metadata)
-- ARGV[3] ttl ms  ARGV[4] fence counter retention ms
-- ARGV[5] queue entry ttl ms, ARGV[6] the caller's grant channel or ''
-- (a waiting caller only)
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, holder pttl ms}
-- held, {3, holder pttl ms} held and queued.
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {1, next_fence(KEYS[2], ARGV[4])}
end
if owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  -- Re-entry never shortens the lease its other holders were promised.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  -- The lease's fence; if its counter expired meanwhile, a new, higher one.
  local f = redis.call('GET', KEYS[2])
  if not f then f = next_fence(KEYS[2], ARGV[4]) end
  return {2, tonumber(f)}
end
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  join_queue(KEYS[3], KEYS[4], KEYS[5], ARGV[1], now_ms(), tonumber(ARGV[5]), ARGV[6])
  return {3, redis.call('PTTL', KEYS[1])}
end
return {0, redis.call('PTTL', KEYS[1])}
