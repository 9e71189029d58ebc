-- Keep a Client's queued mutex waiters of one key in place, cheaply: the
-- periodic call, one per Client and key, made while they hear nothing. It
-- pushes the Client's lapse time in A on, drops the Clients that lapsed,
-- keeps A and W alive (see lib_wait.lua), and tells which of the members
-- are still queued.
-- KEYS[1] lease  KEYS[2] the waiters W  KEYS[3] their Clients A
-- ARGV[1] queue entry ttl ms  ARGV[2] the Client's grant channel
-- ARGV[3..] the Client's members of W
-- Returns {holder pttl ms (-2: free, -1: no expiry, -3: granted, not
-- claimed yet), then per member 1 queued, 0 not}.
local entry = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[3], now + entry, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
redis.call('PEXPIRE', KEYS[3], 2 * entry)
redis.call('PEXPIRE', KEYS[2], 2 * entry)
-- A grant not claimed yet lasts its short claim window: not a time to
-- touch again. The waiter first in line was told it is next when it was
-- granted (lib_wait.lua) and looks if the grant lapses; the others keep
-- their usual pace (-3).
local v = redis.call('GET', KEYS[1])
local r
if v and string.sub(v, -1) == '|' then
  r = {-3}
else
  r = {redis.call('PTTL', KEYS[1])}
end
if #ARGV > 2 then
  local s = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, 3))
  for i = 3, #ARGV do
    if s[i - 2] then r[i - 1] = 1 else r[i - 1] = 0 end
  end
end
return r
