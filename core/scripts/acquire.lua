-- Acquire a lease, or re-enter one held with the same token.
-- KEYS[1] lease "<prefix>:{key}"   KEYS[2] fence counter "<prefix>:{key}:fence"
-- ARGV[1] token   ARGV[2] lease value (token, or token|metadata)
-- ARGV[3] ttl ms  ARGV[4] fence counter retention ms
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, holder pttl ms} held.
local v = redis.call('GET', KEYS[1])
if v then
  if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
    return {2, tonumber(redis.call('GET', KEYS[2]) or '0')}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local f = redis.call('INCR', KEYS[2])
if f == 1 then
  -- The counter was missing (first use, expired, or the server restarted
  -- empty): seed it from the server clock in microseconds so that fences
  -- keep rising past every value handed out before.
  local t = redis.call('TIME')
  local seed = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('SET', KEYS[2], seed, 'PX', ARGV[4])
  f = tonumber(seed)
else
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, f}
