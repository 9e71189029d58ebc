-- Take a daily claim and, if it is the first, count it: one atomic step.
-- KEYS[1] claim  KEYS[2] counter (same hash tag)
-- ARGV[1] token  ARGV[2] expiry, unix ms (next local midnight + grace)
-- Returns 1 first claim today, 0 already claimed.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2]) then
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
  return 1
end
return 0
