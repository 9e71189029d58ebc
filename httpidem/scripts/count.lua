-- The day's count: the exact counter if kept, else the HyperLogLog estimate.
-- KEYS[1] counter  KEYS[2] hyperloglog (same hash tag)
local n = redis.call('GET', KEYS[1])
if n then
  return tonumber(n)
end
return redis.call('PFCOUNT', KEYS[2])
