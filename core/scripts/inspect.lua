-- Read a lease for operators.
-- KEYS[1] lease   KEYS[2] fence counter   KEYS[3] the waiters W
-- KEYS[4] their Clients A
-- Returns {value or false, pttl ms, fence or false, queued waiters, ms the
-- first live one has waited}. A waiter counts while its Client is alive
-- in A (a member of a Client that died stays in W until a grant skips
-- it). Past the first INSPECT_SCAN members, the rest are counted as they
-- stand: an operator's call never holds the server for long.
local INSPECT_SCAN = 10000
local now = now_us()
local alive = {}
for _, chan in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], string.format('%.0f', math.floor(now / 1000)), '+inf')) do
  alive[chan] = true
end
local n, age = 0, 0
local seen = redis.call('ZRANGE', KEYS[3], 0, INSPECT_SCAN - 1, 'WITHSCORES')
for i = 1, #seen, 2 do
  local _, chan = wait_split(seen[i])
  if chan and alive[chan] then
    if n == 0 then
      age = math.max(0, math.floor((now - tonumber(seen[i + 1])) / 1000))
    end
    n = n + 1
  end
end
if #seen == 2 * INSPECT_SCAN then
  n = n + redis.call('ZCARD', KEYS[3]) - INSPECT_SCAN
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), n, age}
