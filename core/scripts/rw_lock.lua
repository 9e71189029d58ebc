-- Take the write hold of a read-write lock, or re-enter the one this token
-- holds. A writer that must wait (join) is recorded as waiting, for an
-- entry time it refreshes with every attempt, so that new readers queue
-- behind it.
-- KEYS[1] writer lease (also the channel)  KEYS[2] readers  KEYS[3] reader
-- values  KEYS[4] waiting writers  KEYS[5] fence counter
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence
-- retention ms  ARGV[5] entry ms  ARGV[6] join ('1' or '0')
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, ms until the
-- holder or the first reader expires}.
local now = now_ms()
sem_prune(KEYS[2], KEYS[3], now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local v = redis.call('GET', KEYS[1])
if v then
  if owns(v, ARGV[1]) then
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    end
    local f = redis.call('GET', KEYS[5])
    if not f then f = next_fence(KEYS[5], ARGV[4]) end
    return {2, tonumber(f)}
  end
  if ARGV[6] == '1' then
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), ARGV[1])
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('ZCARD', KEYS[2]) > 0 then
  if ARGV[6] == '1' then
    redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), ARGV[1])
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
  end
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, math.max(0, math.floor(tonumber(first[2]) - now))}
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, next_fence(KEYS[5], ARGV[4])}
