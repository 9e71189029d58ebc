-- Extend a permit this token holds, never shortening it; never re-create a
-- lost one.
-- KEYS[1] permits  KEYS[2] permit values
-- ARGV[1] token  ARGV[2] ttl ms
-- Returns the permit's remaining ms (>= 1) when held, -1 when it is gone.
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or tonumber(exp) < now then
  return -1
end
exp = tonumber(exp)
local want = now + tonumber(ARGV[2])
if exp < want then
  redis.call('ZADD', KEYS[1], want, ARGV[1])
  sem_keep(KEYS[1], KEYS[2])
  exp = want
end
return math.floor(exp - now)
