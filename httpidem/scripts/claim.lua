-- Take a daily claim and, if it is the first, count it: one atomic step.
-- KEYS[1] claim  KEYS[2] counter (optional, same hash tag)
-- ARGV[1] token (random, one per claim)  ARGV[2] expiry, unix ms (next
-- local midnight + grace)
-- Returns 1 first claim today, 0 already claimed.
--
-- A claim that finds its own token is this claim sent again — go-redis
-- resends a command whose connection broke before the answer came
-- (MaxRetries) — and answers 1 again, counting nothing twice. (A plain
-- SET NX answered 0 to it: the first request of the day was told it was a
-- duplicate, its handler never ran, and the claim, "not first", was never
-- given back.)
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  return 1
end
if cur then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
if KEYS[2] then
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
end
return 1
