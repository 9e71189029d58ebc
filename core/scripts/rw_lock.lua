-- Take the write hold of a read-write lock, or re-enter the one this token
-- holds. A writer that must wait (join) is recorded as waiting, for an
-- entry time it refreshes with every attempt, so that new readers queue
-- behind it; waiting writers get the lock in arrival order, so no writer
-- overtakes another that waits.
-- KEYS[1] writer lease (also the channel)  KEYS[2] readers  KEYS[3] reader
-- values  KEYS[4] waiting writers (token -> entry deadline)  KEYS[5] fence
-- counter  KEYS[6] waiting writers in arrival order (a list)  KEYS[7] their
-- arrival times
-- ARGV[1] token  ARGV[2] lease value  ARGV[3] ttl ms  ARGV[4] fence
-- retention ms  ARGV[5] entry ms  ARGV[6] join ('1' or '0')
-- Returns {1, fence} acquired, {2, fence} re-entered, {0, ms until the
-- holder or the first reader expires}, {0, -2} free but an earlier writer
-- waits.
local now = now_ms()
sem_prune(KEYS[2], KEYS[3], now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)

local function join(reply)
  if ARGV[6] == '1' then
    if redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), ARGV[1]) == 1 then
      redis.call('LREM', KEYS[6], 0, ARGV[1]) -- an entry that had expired
      redis.call('RPUSH', KEYS[6], ARGV[1])
      redis.call('HSET', KEYS[7], ARGV[1], now)
    end
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
    redis.call('PEXPIRE', KEYS[6], ARGV[5])
    redis.call('PEXPIRE', KEYS[7], ARGV[5])
  end
  return reply
end

local v = redis.call('GET', KEYS[1])
if v then
  if owns(v, ARGV[1]) then
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    end
    -- A new fence, as for any acquisition (see acquire.lua).
    return {2, reentry_fence(KEYS[5], ARGV[4], KEYS[1])}
  end
  return join({0, redis.call('PTTL', KEYS[1])})
end
if redis.call('ZCARD', KEYS[2]) > 0 then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return join({0, math.max(0, math.floor(tonumber(first[2]) - now))})
end
-- Free: the earliest live waiting writer comes first.
while true do
  local head = redis.call('LINDEX', KEYS[6], 0)
  if not head or redis.call('ZSCORE', KEYS[4], head) then
    if head and head ~= ARGV[1] then
      return join({0, -2})
    end
    break
  end
  redis.call('LPOP', KEYS[6])
  redis.call('HDEL', KEYS[7], head)
end
if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[6], 1, ARGV[1])
end
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, next_fence(KEYS[5], ARGV[4])}
