local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A queue of waiters is a list of tokens in arrival order (q), their entry
-- deadlines (qt, token -> ms, refreshed by every attempt) and the time each
-- joined (qs, a hash token -> "ms" or "ms|channel", for operators; the
-- channel, when given, is where a grant to that waiter is published: its
-- Client's own, so that a grant reaches one process, not every process
-- subscribed to the key).

-- prune drops queue heads whose entry deadline has passed.
local function prune(q, qt, now, qs)
  while true do
    local head = redis.call('LINDEX', q, 0)
    if not head then return end
    local dl = redis.call('ZSCORE', qt, head)
    if dl and tonumber(dl) >= now then return end
    redis.call('LPOP', q)
    redis.call('ZREM', qt, head)
    redis.call('HDEL', qs, head)
  end
end

-- leave_queue removes token from the queue.
local function leave_queue(q, qt, token, qs)
  if redis.call('ZREM', qt, token) == 1 then
    redis.call('LREM', q, 1, token)
    redis.call('HDEL', qs, token)
  end
end

-- join_queue puts token at the queue's tail, or refreshes its entry; chan
-- (nil or '' for none) is the waiter's grant channel.
local function join_queue(q, qt, qs, token, now, entry, chan)
  if redis.call('ZADD', qt, now + entry, token) == 1 then
    redis.call('RPUSH', q, token)
    if chan and chan ~= '' then
      redis.call('HSET', qs, token, now .. '|' .. chan)
    else
      redis.call('HSET', qs, token, now)
    end
  end
  local keep = 2 * entry
  redis.call('PEXPIRE', q, keep)
  redis.call('PEXPIRE', qt, keep)
  redis.call('PEXPIRE', qs, keep)
end

-- queue_age is how long the first live waiter of the queue has waited, in
-- ms (0: nobody waits).
local function queue_age(q, qt, qs, now)
  for _, t in ipairs(redis.call('LRANGE', q, 0, 15)) do
    local dl = redis.call('ZSCORE', qt, t)
    if dl and tonumber(dl) >= now then
      local since = redis.call('HGET', qs, t)
      if since then return math.max(0, now - tonumber(string.match(since, '^%d+'))) end
      return 0
    end
  end
  return 0
end
