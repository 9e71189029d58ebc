-- Move the expiry of a lease this token holds; never re-create a lost one.
-- KEYS[1] lease
-- ARGV[1] token   ARGV[2] ttl ms
-- Returns 1 extended, 0 held by another token, -1 no lease.
local v = redis.call('GET', KEYS[1])
if not v then
  return -1
end
if owns(v, ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
