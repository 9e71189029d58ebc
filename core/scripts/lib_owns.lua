-- owns: does lease value v belong to token tok? (v is tok or "tok|metadata")
local function owns(v, tok)
  return v and (v == tok or string.sub(v, 1, #tok + 1) == tok .. '|')
end

-- set_nx: SET key val NX PX ttl. Returns true if it set the key, else
-- false and the value the key holds. Redis 7 does both in one call (SET
-- with NX and GET); older servers refuse that pair, and the value is then
-- read with a GET of its own.
local function set_nx(key, val, ttl)
  local r = redis.pcall('SET', key, val, 'NX', 'GET', 'PX', ttl)
  if type(r) == 'table' and r.err then
    if redis.call('SET', key, val, 'NX', 'PX', ttl) then return true end
    return false, redis.call('GET', key)
  end
  if r then return false, r end
  return true
end

-- taken_since: was the lease of the acquisition of fence (a string, or ''
-- for none) taken or re-entered since? Its counter (key counter) stands
-- above fence then: every acquisition and re-entry takes a new fence.
-- Without a fence, or a counter, nothing says so.
local function taken_since(counter, fence)
  if not fence or fence == '' then return false end
  local c = redis.call('GET', counter)
  return c ~= false and c ~= nil and tonumber(c) > tonumber(fence)
end

-- counter_above is taken_since with the counter already read (c: its
-- value, or false when there is none).
local function counter_above(c, fence)
  if not fence or fence == '' then return false end
  return c ~= false and c ~= nil and tonumber(c) > tonumber(fence)
end
