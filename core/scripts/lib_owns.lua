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

-- counter_above: does counter value c (false when there is none) stand
-- above fence (a string, or '' for none)? Every acquisition and re-entry
-- takes a new fence, so the lease of the acquisition of fence was taken or
-- re-entered since. Without a fence, or a counter, nothing says so.
local function counter_above(c, fence)
  if not fence or fence == '' then return false end
  return c ~= false and c ~= nil and tonumber(c) > tonumber(fence)
end

-- taken_since is counter_above reading the counter (key counter) itself.
local function taken_since(counter, fence)
  if not fence or fence == '' then return false end
  return counter_above(redis.call('GET', counter), fence)
end
