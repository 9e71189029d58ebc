-- next_fence increments the fence counter. A missing counter (first use,
-- expired, or a server restarted empty) is seeded from the server clock in
-- microseconds, above every fence handed out before: a counter gains one
-- per acquisition, the clock a million per second. The seeded counter
-- expires after the retention and is seeded again, so idle keys cost
-- nothing for long and a busy one pays no expiry refresh per acquisition.
local function next_fence(key, retention)
  local f = redis.call('INCR', key)
  if f == 1 then
    local t = redis.call('TIME')
    local seed = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('SET', key, seed, 'PX', retention)
    return tonumber(seed)
  end
  return f
end
