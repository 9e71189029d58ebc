-- Take a read hold of a read-write lock, or re-enter the one this token
-- holds. Readers are refused while a writer holds the lock or waits for it
-- (so a stream of readers never starves a writer). The first reader of a
-- read term (no reader inside) raises the fence, so a deposed writer's
-- late writes are rejected; readers that join it share the term's fence.
-- KEYS[1] writer lease (also the channel)  KEYS[2] readers  KEYS[3] reader
-- values  KEYS[4] waiting writers  KEYS[5] fence counter
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence
-- retention ms
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, ms the writer
-- holds on, or -1 when a writer waits}.
local now = now_ms()
local ttl = tonumber(ARGV[3])
sem_prune(KEYS[2], KEYS[3], now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if exp then
  if tonumber(exp) < now + ttl then
    redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
    sem_keep(KEYS[2], KEYS[3])
  end
  local v = redis.call('HGET', KEYS[3], ARGV[1]) or '0|'
  return {2, tonumber(string.match(v, '^(%d+)|'))}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('ZCARD', KEYS[4]) > 0 then
  return {0, -1}
end
local f
if redis.call('ZCARD', KEYS[2]) > 0 then
  f = redis.call('GET', KEYS[5])
end
if not f then
  f = next_fence(KEYS[5], ARGV[4])
end
f = string.format('%.0f', tonumber(f))
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], f .. '|' .. ARGV[2])
sem_keep(KEYS[2], KEYS[3])
return {1, tonumber(f)}
