-- next_fence increments the fence counter. A missing counter (first use,
-- expired, or a server restarted empty) is seeded from the server clock in
-- microseconds, above every fence handed out before: a counter gains one
-- per acquisition, the clock a million per second. The seeded counter
-- expires after the retention and is seeded again, so idle keys cost
-- nothing for long and a busy one pays no expiry refresh per acquisition.
--
-- Only Redlock passes proposed: a fence in microseconds that its client
-- sends, the same, to every node (redlock_fence.go). A missing counter is
-- seeded with the proposal instead when it is above the server clock, by
-- at most FENCE_LEAD_MAX, so the nodes that seed a key together agree.
local FENCE_LEAD_MAX = 200000

local function next_fence(key, retention, proposed)
  local f = redis.call('INCR', key)
  if f == 1 then
    local t = redis.call('TIME')
    local seed = t[1] .. string.format('%06d', tonumber(t[2]))
    if proposed then
      local now = tonumber(seed)
      seed = string.format('%.0f', math.max(now, math.min(tonumber(proposed), now + FENCE_LEAD_MAX)))
    end
    redis.call('SET', key, seed, 'PX', retention)
    return tonumber(seed)
  end
  return f
end
