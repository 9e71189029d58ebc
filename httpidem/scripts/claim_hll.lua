-- Add a subject to the day's HyperLogLog and keep it until the expiry.
-- KEYS[1] hyperloglog  ARGV[1] subject  ARGV[2] expiry, unix ms
-- Returns PFADD's answer: 1 if the estimate changed (a hint, not a gate).
local added = redis.call('PFADD', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return added
