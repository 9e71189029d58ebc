-- Remove the holds of a key an operator saw (Client.Evict): its lock's
-- lease, its semaphore's permits, its read-write lock's holds, each only
-- while the acquisition Inspect showed — its token and fence — still holds
-- it: a hold taken since, even under the same token, is left be; raise
-- each fence that lost a holder, and wake the waiters.
-- KEYS[1] lease  KEYS[2] fence  KEYS[3] permits  KEYS[4] permit values
-- KEYS[5] semaphore fence  KEYS[6] rw writer  KEYS[7] rw readers
-- KEYS[8] rw reader values  KEYS[9] rw fence  KEYS[10] the call's memo
-- ("<lease>:ev:<nonce>", a nonce unique to the Evict call)
-- ARGV[1] fence retention ms  ARGV[2] the nonce
-- ARGV[3..] the holds seen, "<kind>:<fence>:<token>" each, kind lock,
-- permit, write or read
-- Returns the holds removed, as given.
--
-- A run sent again by go-redis (its answer lost) finds its memo, kept a
-- minute, and answers what the first run did, doing nothing: it must not
-- take a hold a waiter took since the first run, nor say nothing was held.
--
-- The waiters are woken both ways, PUBLISH and SPUBLISH (Redis >= 7): the
-- operator's Client need not know whether the fleet uses sharded
-- notifications (WithShardedNotify), and an eviction is rare.
local function wake(ch)
  redis.call('PUBLISH', ch, 'r:')
  redis.pcall('SPUBLISH', ch, 'r:')
end
local memo = redis.call('GET', KEYS[10])
if memo then
  return cjson.decode(memo)
end
local removed = {}
-- at: does a permit's or reader's value "<fence>|…" (lib_sem.lua) belong
-- to the acquisition of fence f?
local function at(v, f)
  return v and string.sub(v, 1, #f + 1) == f .. '|'
end
-- since: has no acquisition after the one of fence f raised counter c? (A
-- Redlock node's counter may lag the fence its Client returned, the
-- highest of the nodes': not above it, it saw none.)
local function since(c, f)
  return not c or tonumber(c) <= tonumber(f)
end
local permits, rw = false, false
for i = 3, #ARGV do
  local kind, f, tok = string.match(ARGV[i], '^(%a+):(%d+):(.*)$')
  local took = false
  if kind == 'lock' and owns(redis.call('GET', KEYS[1]), tok) and since(redis.call('GET', KEYS[2]), f) then
    redis.call('DEL', KEYS[1])
    next_fence(KEYS[2], ARGV[1])
    wake(KEYS[1])
    took = true
  elseif kind == 'permit' and redis.call('ZSCORE', KEYS[3], tok)
      and at(redis.call('HGET', KEYS[4], tok) or ('0|' .. tok), f) then
    redis.call('ZREM', KEYS[3], tok)
    redis.call('HDEL', KEYS[4], tok)
    permits, took = true, true
  elseif kind == 'write' and owns(redis.call('GET', KEYS[6]), tok) and since(redis.call('GET', KEYS[9]), f) then
    redis.call('DEL', KEYS[6])
    rw, took = true, true
  elseif kind == 'read' and redis.call('ZSCORE', KEYS[7], tok)
      and at(redis.call('HGET', KEYS[8], tok) or ('0|' .. tok), f) then
    redis.call('ZREM', KEYS[7], tok)
    redis.call('HDEL', KEYS[8], tok)
    rw, took = true, true
  end
  if took then
    removed[#removed + 1] = ARGV[i]
  end
end
if permits then
  next_fence(KEYS[5], ARGV[1])
  wake(KEYS[3])
end
if rw then
  next_fence(KEYS[9], ARGV[1])
  wake(KEYS[6])
end
local list = '[]'
if #removed > 0 then list = cjson.encode(removed) end
redis.call('SET', KEYS[10], list, 'PX', 60000)
return removed
