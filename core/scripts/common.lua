-- Helpers shared by the scripts; prepended to each of them.

-- owns: does lease value v belong to token tok? (v is tok or "tok|metadata")
local function owns(v, tok)
  return v and (v == tok or string.sub(v, 1, #tok + 1) == tok .. '|')
end

-- next_fence increments the fence counter. A missing counter (first use,
-- expired, or a server restarted empty) is seeded from the server clock in
-- microseconds, above every fence handed out before.
local function next_fence(key, retention)
  local f = redis.call('INCR', key)
  if f == 1 then
    local t = redis.call('TIME')
    local seed = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('SET', key, seed, 'PX', retention)
    return tonumber(seed)
  end
  redis.call('PEXPIRE', key, retention)
  return f
end

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
