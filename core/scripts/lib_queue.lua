local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- prune drops fair-queue heads whose entry deadline has passed.
local function prune(q, qt, now)
  while true do
    local head = redis.call('LINDEX', q, 0)
    if not head then return end
    local dl = redis.call('ZSCORE', qt, head)
    if dl and tonumber(dl) >= now then return end
    redis.call('LPOP', q)
    redis.call('ZREM', qt, head)
  end
end

-- leave_queue removes token from the fair queue.
local function leave_queue(q, qt, token)
  if redis.call('ZREM', qt, token) == 1 then
    redis.call('LREM', q, 1, token)
  end
end
