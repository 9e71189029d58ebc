-- Take a permit of a semaphore, or re-enter the one this token holds.
-- Waiters that must not be overtaken (WithFair, or a waiter that starved)
-- queue in a list (KEYS[4]) with entry deadlines (KEYS[5]) they refresh
-- with every attempt: a queued waiter gets a permit when fewer waiters
-- queue before it than permits are free, and anyone else only when more
-- permits are free than waiters queue — so nobody overtakes the queue.
-- KEYS[1] permits (also the release channel)  KEYS[2] fence counter
-- KEYS[3] permit values  KEYS[4] queue  KEYS[5] queue deadlines
-- KEYS[6] queue arrival times
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence
-- retention ms  ARGV[5] limit  ARGV[6] queue entry ttl ms  ARGV[7] '1' to
-- join the queue when not served  ARGV[8] the caller's grant channel, or
-- absent (see sem_release.lua)
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, ms until the
-- first permit expires} when all are held, {0, -2} when a permit is free
-- but earlier waiters come first.
local now = now_ms()
local ttl = tonumber(ARGV[3])
sem_prune(KEYS[1], KEYS[3], now)
-- Waiters that stopped refreshing their entry (gone, or given up) leave.
for _, t in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)) do
  redis.call('ZREM', KEYS[5], t)
  redis.call('LREM', KEYS[4], 1, t)
  redis.call('HDEL', KEYS[6], t)
end
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp then
  if tonumber(exp) < now + ttl then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
    sem_keep(KEYS[1], KEYS[3])
  end
  leave_queue(KEYS[4], KEYS[5], ARGV[1], KEYS[6])
  local v = redis.call('HGET', KEYS[3], ARGV[1]) or '0|'
  return {2, tonumber(string.match(v, '^(%d+)|'))}
end

local function wait(reply)
  if ARGV[7] == '1' then
    join_queue(KEYS[4], KEYS[5], KEYS[6], ARGV[1], now, tonumber(ARGV[6]), ARGV[8])
  end
  return reply
end

local free = tonumber(ARGV[5]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return wait({0, math.max(0, math.floor(tonumber(first[2]) - now))})
end
local served = false
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then
  for _, t in ipairs(redis.call('LRANGE', KEYS[4], 0, free - 1)) do
    if t == ARGV[1] then served = true end
  end
else
  served = redis.call('LLEN', KEYS[4]) < free
end
if not served then
  return wait({0, -2})
end
leave_queue(KEYS[4], KEYS[5], ARGV[1], KEYS[6])
local f = next_fence(KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], string.format('%.0f', f) .. '|' .. ARGV[2])
sem_keep(KEYS[1], KEYS[3])
return {1, f}
