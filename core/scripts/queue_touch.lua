-- Keep a Client's queued mutex waiters of one key in place, cheaply: the
-- periodic call, one per Client and key, made while they hear nothing. It
-- refreshes the Client's alive key and W (see lib_wait.lua), and tells
-- which of the members are still queued.
-- KEYS[1] lease  KEYS[2] the waiters W  KEYS[3] the Client's alive key
-- ARGV[1] queue entry ttl ms  ARGV[2..] the Client's members of W
-- Returns {holder pttl ms (-2: free), then per member 1 queued, 0 not}.
local entry = tonumber(ARGV[1])
redis.call('SET', KEYS[3], '1', 'PX', entry)
redis.call('PEXPIRE', KEYS[2], 2 * entry)
local r = {redis.call('PTTL', KEYS[1])}
if #ARGV > 1 then
  local s = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, 2))
  for i = 2, #ARGV do
    if s[i - 1] then r[i] = 1 else r[i] = 0 end
  end
end
return r
