-- Extend a lease this token holds, never shortening it; never re-create a
-- lost one. With KEYS[2], the lease's fence counter lives at least
-- ARGV[3] ms from now too (hold_counter): a renewal that the Client sends
-- when the counter could otherwise expire before the lease.
-- KEYS[1] lease  KEYS[2] (optional) its fence counter
-- ARGV[1] token   ARGV[2] ttl ms  ARGV[3] (with KEYS[2]) the counter's ms
-- Returns the lease's remaining ms (>= 1) when held by token (its expiry
-- is now the later of the old one and ttl from now), 0 when held by another
-- token, -1 when there is no lease.
local v = redis.call('GET', KEYS[1])
if not v then
  return -1
end
if not owns(v, ARGV[1]) then
  return 0
end
local left = redis.call('PTTL', KEYS[1])
local want = tonumber(ARGV[2])
if left < want then
  redis.call('PEXPIRE', KEYS[1], want)
  left = want
end
if KEYS[2] then
  hold_counter(KEYS[2], math.max(tonumber(ARGV[3]), left + 60000))
end
return left
