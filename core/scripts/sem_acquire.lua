-- Take a permit of a semaphore, or re-enter the one this token holds.
-- KEYS[1] permits (also the release channel)  KEYS[2] fence counter
-- KEYS[3] permit values
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence
-- retention ms  ARGV[5] limit
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, ms until the
-- first permit expires} when all limit permits are held.
local now = now_ms()
local ttl = tonumber(ARGV[3])
sem_prune(KEYS[1], KEYS[3], now)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp then
  -- Re-entry never shortens the permit.
  if tonumber(exp) < now + ttl then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
    sem_keep(KEYS[1], KEYS[3])
  end
  local v = redis.call('HGET', KEYS[3], ARGV[1]) or '0|'
  return {2, tonumber(string.match(v, '^(%d+)|'))}
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, math.max(0, math.floor(tonumber(first[2]) - now))}
end
local f = next_fence(KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f', f) .. '|' .. ARGV[2])
sem_keep(KEYS[1], KEYS[3])
return {1, f}
