-- Read a key's semaphore permits and read-write holds for operators.
-- KEYS[1] permits  KEYS[2] permit values  KEYS[3] rw writer  KEYS[4] rw
-- readers  KEYS[5] rw reader values  KEYS[6] rw waiting writers
-- KEYS[7] rw fence counter  KEYS[8] semaphore queue deadlines
-- KEYS[9] semaphore queue  KEYS[10] its arrival times  KEYS[11] waiting
-- writers in arrival order  KEYS[12] their arrival times
-- Returns {waiting writers, queued permit waiters, ms the first waiting
-- writer has waited, ms the first permit waiter has waited, then per hold:
-- kind, "<fence>|<value>", ms left}.
local now = now_ms()
local out = {redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf'), redis.call('ZCOUNT', KEYS[8], '(' .. now, '+inf'),
  queue_age(KEYS[11], KEYS[6], KEYS[12], now), queue_age(KEYS[9], KEYS[8], KEYS[10], now)}
local function list(z, h, kind)
  local m = redis.call('ZRANGEBYSCORE', z, now, '+inf', 'WITHSCORES') -- live through its expiry's ms (lib_sem.lua)
  for i = 1, #m, 2 do
    table.insert(out, kind)
    table.insert(out, redis.call('HGET', KEYS[h], m[i]) or ('0|' .. m[i]))
    table.insert(out, tostring(math.floor(tonumber(m[i + 1]) - now)))
  end
end
list(KEYS[1], 2, 'permit')
local w = redis.call('GET', KEYS[3])
if w then
  table.insert(out, 'write')
  table.insert(out, (redis.call('GET', KEYS[7]) or '0') .. '|' .. w)
  table.insert(out, tostring(redis.call('PTTL', KEYS[3])))
end
list(KEYS[4], 5, 'read')
return out
