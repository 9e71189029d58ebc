-- next_fence increments the fence counter. A missing counter (first use,
-- expired, or a server restarted empty) is seeded from the server clock in
-- microseconds, above every fence handed out before: a counter gains one
-- per acquisition, the clock a million per second. The seeded counter
-- expires after the retention and is seeded again, so idle keys cost
-- nothing for long and a busy one pays no expiry refresh per acquisition.
--
-- Only Redlock passes proposed: a fence in microseconds that its client
-- sends, the same, to every node (see redlock_fence.go). The counter then
-- becomes at least the proposal — so nodes that counted differently agree
-- again — but never more than FENCE_LEAD_MAX above this server's clock, and
-- never less than the rules above give.
local FENCE_LEAD_MAX = 200000

local function proposed_fence(f, proposed, t)
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.max(f, math.min(tonumber(proposed), now + FENCE_LEAD_MAX))
end

local function next_fence(key, retention, proposed)
  local f = redis.call('INCR', key)
  if f == 1 then
    local t = redis.call('TIME')
    local seed = t[1] .. string.format('%06d', tonumber(t[2]))
    if proposed then
      seed = string.format('%.0f', proposed_fence(tonumber(seed), proposed, t))
    end
    redis.call('SET', key, seed, 'PX', retention)
    return tonumber(seed)
  end
  if proposed then
    local p = proposed_fence(f, proposed, redis.call('TIME'))
    if p > f then
      redis.call('SET', key, string.format('%.0f', p), 'KEEPTTL')
    end
    return p
  end
  return f
end
