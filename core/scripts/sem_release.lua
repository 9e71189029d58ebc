-- Give back a permit this token holds and wake a waiter.
-- KEYS[1] permits (also the release channel)  KEYS[2] permit values
-- ARGV[1] token
-- Returns 1 released, 0 not held (gone, or expired).
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if tonumber(exp) <= now_ms() then
  return 0
end
redis.call('PUBLISH', KEYS[1], 'r:')
return 1
