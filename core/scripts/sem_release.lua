-- Give back a permit this token holds and wake a waiter; a token that
-- holds none leaves the semaphore's queue instead (a fair waiter giving
-- up), waking the next waiter if it was queued.
-- KEYS[1] permits (also the release channel)  KEYS[2] permit values
-- KEYS[3] queue  KEYS[4] queue deadlines  KEYS[5] queue arrival times
-- ARGV[1] token
-- Returns 1 released, 0 not held (gone, or expired).
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then
  if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
    redis.call('LREM', KEYS[3], 1, ARGV[1])
    redis.call('HDEL', KEYS[5], ARGV[1])
    redis.call('PUBLISH', KEYS[1], 'r:')
  end
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if tonumber(exp) <= now_ms() then
  return 0
end
redis.call('PUBLISH', KEYS[1], 'r:')
return 1
