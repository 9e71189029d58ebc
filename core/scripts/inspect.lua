-- Read a lease for operators.
-- KEYS[1] lease   KEYS[2] fence counter   KEYS[3] the waiters W
-- KEYS[4] their Clients A
-- Returns {value or false, pttl ms, fence or false, queued waiters, ms the
-- first live one has waited}.
local age = 0
local now = now_us()
local first = redis.call('ZRANGE', KEYS[3], 0, 15, 'WITHSCORES')
for i = 1, #first, 2 do
  local _, chan = wait_split(first[i])
  local lapse = chan and redis.call('ZSCORE', KEYS[4], chan)
  if lapse and tonumber(lapse) * 1000 >= now then
    age = math.max(0, math.floor((now - tonumber(first[i + 1])) / 1000))
    break
  end
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), age}
