-- next_fence returns the key's next fence: one above its counter, and
-- never below the server clock in microseconds. A fence is thus at least
-- the time it was handed out, and the next one is above every fence handed
-- out before even when the counter is missing (first use, expired, or a
-- server restarted empty) or stale (a server restarted from a snapshot, a
-- replica promoted before it had the latest writes): the clock has moved
-- on past them, by far more than a counter gains (one per acquisition
-- against a million a second). This assumes the server's clock does not
-- step back further than the time such a restart or failover takes; a
-- counter that lives counts on from where it was, whatever the clock does.
-- A counter that the clock overtook is set to the fence, with the
-- retention as its expiry (and, for a Redlock proposal ahead of the clock,
-- the time until the clock passes it: ahead_ms), so idle keys cost
-- nothing for long.
--
-- Only Redlock passes proposed: a fence in microseconds that its client
-- sends, the same, to every node (redlock_fence.go). The floor is then the
-- proposal instead of the server clock when it is above the clock, by at
-- most FENCE_LEAD_MAX, so that the nodes agree.
local FENCE_LEAD_MAX = 200000

-- hold_counter: the counter lives at least ms (a number or its string)
-- from now. A counter must outlive every lease of its key: a fenced
-- release (release.lua, rw_unlock.lua) that finds no counter cannot tell
-- a lease taken since from its own.
local function hold_counter(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- ahead_ms: how long (ms, as a string) a counter at f, with the clock at
-- clock (both µs), must live: until the clock has passed f, and retention
-- (ms) beyond. A counter ahead of the clock is one of fences handed out
-- faster than it ticks, or of a Redlock proposal, or one the clock stepped
-- back under: if it expired sooner, a counter seeded from the clock after
-- it would start below fences already handed out.
local function ahead_ms(f, clock, retention)
  return string.format('%.0f', tonumber(retention) + math.max(0, math.ceil((f - clock) / 1000)))
end

local function next_fence(key, retention, proposed)
  local f = redis.call('INCR', key)
  local t = redis.call('TIME')
  local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local floor = clock
  if proposed then
    floor = math.max(clock, math.min(tonumber(proposed), clock + FENCE_LEAD_MAX))
  end
  if f < floor then
    redis.call('SET', key, string.format('%.0f', floor), 'PX', ahead_ms(floor, clock, retention))
    return floor
  end
  -- Ahead of the clock (an acquisition in the same microsecond, a Redlock
  -- proposal, a clock that stepped back): the counter keeps the expiry an
  -- earlier acquisition gave it, unless that is too soon for the clock to
  -- pass it.
  hold_counter(key, ahead_ms(f, clock, retention))
  return f
end

-- fresh_fence is next_fence for an acquisition that found its lease key
-- free (the mutex's SET NX took it): no lease of the key lives, so the
-- counter's expiry is owed to no lease, only to the clock (ahead_ms), and
-- may be set from now, whatever it was. It writes the floor (the clock's
-- fence, or a Redlock proposal above it, as next_fence takes it) and reads
-- the old counter in one SET ... GET, instead of an INCR and a SET; only
-- when the old counter is not below the floor (an acquisition in the same
-- microsecond, a clock that stepped back) does it write again, one above
-- the old counter, to live until the clock has passed it. Servers before
-- Redis 6.2 refuse SET ... GET: next_fence then. The clock's fence is
-- written as TIME's two fields joined, the microseconds padded to six
-- digits: the same decimal as string.format('%.0f', floor), at a third of
-- its cost (every acquisition of a free key pays it).
local function fresh_fence(key, retention, proposed)
  local t = redis.call('TIME')
  local us = t[2]
  local clock = tonumber(t[1]) * 1000000 + tonumber(us)
  local floor, text, ttl = clock, nil, retention
  if proposed then
    floor = math.max(clock, math.min(tonumber(proposed), clock + FENCE_LEAD_MAX))
  end
  if floor == clock then
    text = t[1] .. string.sub('000000', #us + 1) .. us
  else
    text, ttl = string.format('%.0f', floor), ahead_ms(floor, clock, retention)
  end
  local old = redis.pcall('SET', key, text, 'PX', ttl, 'GET')
  if type(old) == 'table' and old.err then
    return next_fence(key, retention, proposed)
  end
  local f = old and tonumber(old)
  if f and f >= floor then
    f = f + 1
    redis.call('SET', key, string.format('%.0f', f), 'PX', ahead_ms(f, clock, retention))
    return f
  end
  return floor
end

-- reentry_fence is next_fence for a re-entry of lease: the lease may
-- outlive the retention this caller gives (another holder's longer TTL),
-- and its counter must not expire first.
local function reentry_fence(key, retention, lease, proposed)
  local f = next_fence(key, retention, proposed)
  hold_counter(key, redis.call('PTTL', lease) + 60000)
  return f
end

